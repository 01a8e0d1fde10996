"""Context parallelism from scratch: causal ring attention on S ranks, against full attention.

Chapter 9, "Context parallelism: ring attention". Every rank draws the same q, k, v of shape
(b, s, a, d) from the seed, keeps the tokens its layout gives it (two of 2S chunks: contiguous
or zigzag, :func:`helpers.parallel.cp.positions`) and runs
:func:`helpers.parallel.cp.ring_attention`: S ring steps forward with the online-softmax merge,
and an explicit ring backward. It checks its output and its dQ, dK, dV against causal attention
of the whole sequence in one process (run inside the rank), and reports the chunk pairs it
computed per step and the bytes it sent.

Then the same tensors go through DeepSpeed-Ulysses (:mod:`helpers.parallel.sp`: all-to-all from
sequence split to head split and back) with its all-to-all bytes counted, when the heads divide
by S; otherwise the rank reports why Ulysses cannot run.

With ``--plugin`` (4 ranks) the demo instead builds Colossal-AI's ``HybridParallelPlugin`` with
tp=2 and sp=2, once with ``sequence_parallelism_mode="ring_attn"`` and once with ``"all_to_all"``,
and reports the groups and settings the plugin made: the construction runs on gloo as shipped.

    python -m torch.distributed.run --nproc_per_node 4 -m helpers.demos.ch09_ring_attention
"""

from helpers.parallel.cp import LAYOUTS, AllToAllCounter, Ring, positions, ring_attention
from helpers.parallel.sp import causal_attention, heads_to_seq, seq_to_heads
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch09 import RingConfigResult, RingResult, UlyssesResult
from helpers.train.reference import check_close, global_max, randn, strict_fp32


def _check(name, got, want, dev) -> float:
    return global_max(
        max(check_close(f"{name} {n}", g, w) for n, g, w in zip("OQKV", got, want)), dev
    )


def plugin_groups() -> None:
    """Build HybridParallelPlugin (tp=2, sp=2) in both of its own-axis modes; report its groups."""
    import torch.distributed as dist
    from colossalai.booster.plugin import HybridParallelPlugin

    with cli.plugin_lifetime() as keep:
        for mode in ("ring_attn", "all_to_all"):
            plugin = keep(
                HybridParallelPlugin(
                    tp_size=2,
                    pp_size=1,
                    sp_size=2,
                    precision="fp32",
                    enable_sequence_parallelism=True,
                    sequence_parallelism_mode=mode,
                )
            )
            config = plugin.shard_config
            emit(
                RingConfigResult,
                mode=mode,
                sp_group=dist.get_process_group_ranks(plugin.sp_group),
                tp_group=dist.get_process_group_ranks(plugin.tp_group),
                mesh_shape=list(plugin.pg_mesh.shape),
                sp_axis=plugin.sp_axis,
                enable_flash_attention=config.enable_flash_attention,
                parallel_output=config.parallel_output,
                inner_ring_size=config.inner_ring_size,
            )


def main() -> None:
    parser = cli.parser(__doc__)
    cli.add(parser, "batch", 2, help="batch size b")
    cli.add(parser, "seq", 32, help="sequence length s (divisible by 2 x world size)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads a")
    parser.add_argument("--head-dim", type=int, default=8, help="head size d")
    cli.add(parser, "seed", cli.SEED)
    parser.add_argument("--plugin", action="store_true", help="Colossal-AI's groups instead")
    args = parser.parse_args()
    if args.plugin:
        with distributed():
            plugin_groups()
        return
    strict_fp32()
    b, s, a, d = args.batch, args.seq, args.heads, args.head_dim

    with distributed() as env:
        S, r, dev = env.world_size, env.rank, env.device
        q, k, v, g = (randn(b, s, a, d, seed=args.seed + i, device=dev) for i in range(4))
        ref = [t.clone().requires_grad_() for t in (q, k, v)]
        ref_out = causal_attention(*ref)  # (b, s, a, d), the whole sequence in one process
        (ref_out * g).sum().backward()
        want = [ref_out.detach()] + [t.grad for t in ref]
        if r == 0:
            say(f"ring attention on {S} ranks ({env.backend}): b={b}, s={s}, a={a}, d={d}")

        for layout in LAYOUTS:
            pos = positions(r, S, s, layout).to(dev)
            ring = Ring()
            mine = [t[:, pos].clone().requires_grad_() for t in (q, k, v)]  # (b, s/S, a, d)
            out = ring_attention(*mine, ring, layout)
            (out * g[:, pos]).sum().backward()
            got = [out.detach()] + [t.grad for t in mine]
            diff = _check(f"ring ({layout})", got, [w[:, pos] for w in want], dev)
            if r == 0:
                say(f"  {layout}: max |output, dQ, dK, dV - reference| = {diff:.2e}")
            emit(
                RingResult,
                method="ring",
                layout=layout,
                world_size=S,
                positions=pos.tolist(),
                work=ring.work,
                sent=ring.sent,
                max_diff=diff,
                backend=env.backend,
                shape=[b, s, a, d],
                element_size=q.element_size(),
            )

        if a % S:
            if r == 0:
                say(f"  Ulysses: {a} heads do not divide among {S} ranks; it cannot run here")
            emit(
                UlyssesResult,
                method="ulysses",
                world_size=S,
                ran=False,
                shape=[b, s, a, d],
                reason=f"{a} heads are not divisible by S={S}",
            )
            return
        tokens = slice(r * s // S, (r + 1) * s // S)
        mine = [t[:, tokens].clone().requires_grad_() for t in (q, k, v)]  # (b, s/S, a, d)
        with AllToAllCounter() as counter:
            heads = [seq_to_heads(t) for t in mine]  # (b, s, a/S, d)
            out = heads_to_seq(causal_attention(*heads))  # (b, s/S, a, d)
            counter.phase = "backward"
            (out * g[:, tokens]).sum().backward()
        got = [out.detach()] + [t.grad for t in mine]
        diff = _check("Ulysses", got, [w[:, tokens] for w in want], dev)
        if r == 0:
            say(f"  Ulysses: max |output, dQ, dK, dV - reference| = {diff:.2e}")
            say("OK: ring attention (both layouts) and Ulysses match full attention")
        emit(
            UlyssesResult,
            method="ulysses",
            world_size=S,
            ran=True,
            sent=counter.sent,
            max_diff=diff,
            shape=[b, s, a, d],
            element_size=q.element_size(),
        )


if __name__ == "__main__":
    main()
