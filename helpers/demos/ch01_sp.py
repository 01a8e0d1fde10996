"""Sequence parallelism from scratch: DeepSpeed-Ulysses attention with two all-to-alls.

Chapter 1, "the four ways to split the work", way 4. The input x (b, s, h) is split along the
sequence, so each of P ranks holds (b, s/P, h). Following DeepSpeed-Ulysses (Jacobs et al. 2023,
Sec. 3.1, Fig. 2) each rank projects q, k, v for its own tokens and all a heads, then an
all-to-all turns (b, s/P, a, d) into (b, s, a/P, d): the whole sequence for a/P of the heads.
Causal softmax attention runs per head as usual, an all-to-all turns the result back into
(b, s/P, a, d), and the output projection acts on the rank's own tokens. The all-to-all is
differentiable (:class:`helpers.parallel.sp.AllToAll`): its backward is the inverse all-to-all.
The weights are replicated, so their gradients are summed over the ranks, as in data parallelism.

gloo on torch 2.13 implements ``dist.all_to_all_single`` (and ``dist.all_to_all``): checked with
2 and 4 CPU processes, so the demo uses it directly on both gloo and NCCL.

Every rank checks its slice of the output and of dL/dx, and the summed weight gradients, against
full single-process attention (``F.scaled_dot_product_attention``) run inside the rank.

With ``--dp D`` the world is a D × P grid (:class:`helpers.parallel.mesh.RankMesh`, sp fastest):
each data replica takes b/D of the batch rows and runs Ulysses over its own sequence group, and
the weight gradients are summed over all D·P ranks (the loss is normalised globally, so the sum
is the mean).

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch01_sp --seq 8 --heads 4
"""

import torch.distributed as dist
import torch.nn.functional as F

from helpers.parallel.mesh import RankMesh
from helpers.parallel.sp import causal_attention, heads_to_seq, seq_to_heads
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch01 import SpResult
from helpers.train.reference import check_close, global_max, randn, sig, strict_fp32


def main() -> None:
    parser = cli.parser(__doc__)
    cli.add(parser, "batch", 2, help="batch size b")
    cli.add(parser, "seq", 8, help="sequence length s (divisible by world size)")
    parser.add_argument(
        "--heads", type=int, default=4, help="attention heads a (divisible by world size)"
    )
    parser.add_argument("--head-dim", type=int, default=4, help="head size d (h = a*d)")
    parser.add_argument(
        "--dp", type=int, default=1, help="data-parallel replicas D (world = D x P)"
    )
    cli.add(parser, "seed", cli.SEED)
    args = parser.parse_args()
    strict_fp32()
    b, s, a, d = args.batch, args.seq, args.heads, args.head_dim
    h = a * d

    with distributed() as env:
        mesh = RankMesh.for_world(env.world_size, sp=env.world_size // args.dp)
        P, r, dev, D = mesh.sp, mesh.coords(env.rank)["sp"], env.device, mesh.dp
        sp_group = None
        for ranks in mesh.groups("sp"):  # every rank creates every group, in the same order
            group = dist.new_group(ranks) if D > 1 else None
            sp_group = group if env.rank in ranks else sp_group
        if b % D:
            raise ValueError(f"batch b={b} must be divisible by the data-parallel size D={D}")
        rows = slice(
            mesh.coords(env.rank)["dp"] * b // D, (mesh.coords(env.rank)["dp"] + 1) * b // D
        )
        if s % P:
            raise ValueError(
                f"sequence length s={s} must be divisible by the sequence-parallel size P={P}"
            )
        if a % P:
            raise ValueError(
                f"number of heads a={a} must be divisible by the sequence-parallel size P={P} "
                "(Ulysses splits heads)"
            )
        x = randn(b, s, h, seed=args.seed + 1, device=dev)  # (b, s, h)
        target = randn(b, s, h, seed=args.seed + 2, device=dev)  # (b, s, h)
        weights = [
            randn(h, h, seed=args.seed + 3 + i, device=dev, scale=h**-0.5) for i in range(4)
        ]  # Wq, Wk, Wv, Wo

        # [start: ulysses]
        # --- Ulysses: my tokens in, my tokens out; heads split in the middle
        tokens = slice(r * s // P, (r + 1) * s // P)
        x_r = x[rows, tokens].clone().requires_grad_()  # (b/D, s/P, h)
        wq, wk, wv, wo = (w.clone().requires_grad_() for w in weights)  # (h, h) each, replicated
        q, k, v = ((x_r @ w.T).view(b // D, s // P, a, d) for w in (wq, wk, wv))  # (b/D, s/P, a, d)
        q, k, v = (seq_to_heads(t, sp_group) for t in (q, k, v))  # (b/D, s, a/P, d)
        shape_heads = list(q.shape)
        o = causal_attention(q, k, v)  # (b, s, a/P, d)
        o = heads_to_seq(o, sp_group)  # (b/D, s/P, a, d)
        y_r = o.reshape(b // D, s // P, h) @ wo.T  # (b/D, s/P, h)
        # my share of the mean
        loss_r = F.mse_loss(y_r, target[rows, tokens], reduction="sum") / target.numel()
        loss_r.backward()
        # [end: ulysses]
        for w in (wq, wk, wv, wo):  # each rank's tokens contribute to the replicated weights' grads
            dist.all_reduce(w.grad)
        loss = loss_r.detach().clone()
        dist.all_reduce(loss)

        # --- single-process reference: full attention over the whole sequence, all heads
        ref_x = x.clone().requires_grad_()
        ref_w = [w.clone().requires_grad_() for w in weights]
        # (b, a, s, d)
        rq, rk, rv = ((ref_x @ w.T).view(b, s, a, d).transpose(1, 2) for w in ref_w[:3])
        # (b, s, a, d)
        ref_o = F.scaled_dot_product_attention(rq, rk, rv, is_causal=True).transpose(1, 2)
        ref_y = ref_o.reshape(b, s, h) @ ref_w[3].T  # (b, s, h)
        ref_loss = F.mse_loss(ref_y, target)
        ref_loss.backward()

        check_close("loss", loss, ref_loss)
        out_diff = global_max(
            check_close(
                f"output for tokens {tokens.start}:{tokens.stop}", y_r, ref_y[rows, tokens]
            ),
            dev,
        )
        x_diff = global_max(
            check_close(
                f"dL/dx for tokens {tokens.start}:{tokens.stop}", x_r.grad, ref_x.grad[rows, tokens]
            ),
            dev,
        )
        w_diff = global_max(
            max(
                check_close(f"grad of {n}", w.grad, rw.grad)
                for n, w, rw in zip(("Wq", "Wk", "Wv", "Wo"), (wq, wk, wv, wo), ref_w)
            ),
            dev,
        )

        if env.rank == 0:
            if D > 1:
                say(
                    f"{D} data replicas x {P} sequence ranks: replica d takes batch rows d*b/D..; "
                    f"sequence groups {mesh.groups('sp')}, weight gradients summed over all "
                    f"{D * P} ranks"
                )
            say(
                f"Ulysses sequence parallel on {P} ranks ({env.backend}): b={b}, s={s}, "
                f"a={a} heads of d={d}, h={h}"
            )
            say(f"  x per rank {[b // D, s // P, h]} (tokens {s // P} per rank)")
            say(
                f"  q,k,v per rank {[b // D, s // P, a, d]} -> all-to-all -> {shape_heads} "
                f"(whole sequence, {a // P} of {a} heads)"
            )
            say(
                f"  attention output -> all-to-all -> {[b // D, s // P, a, d]} "
                f"-> output projection {[b // D, s // P, h]}"
            )
            say("  communication: 4 all-to-alls forward (q, k, v, o), 4 backward")
            say(f"loss {sig(loss.item())} (reference {sig(ref_loss.item())})")
            say(
                f"max |output - reference| = {out_diff:.2e}, max |dL/dx - reference| = {x_diff:.2e}"
            )
            say(f"max |weight grad - reference| = {w_diff:.2e}")
            say("OK: Ulysses attention matches full single-process attention")
        emit(
            SpResult,
            world_size=P,
            batch=b,
            seq_len=s,
            local_seq=s // P,
            heads=a,
            local_heads=a // P,
            head_dim=d,
            tokens=[tokens.start, tokens.stop],
            x_local_shape=list(x_r.shape),
            heads_shape=shape_heads,
            loss=sig(loss.item()),
            ref_loss=sig(ref_loss.item()),
            max_out_diff=out_diff,
            max_x_grad_diff=x_diff,
            max_w_grad_diff=w_diff,
            backend=env.backend,
            **(
                {
                    "dp": D,
                    "rows": [rows.start, rows.stop],
                    "sp_group": mesh.group_of(env.rank, "sp"),
                }
                if D > 1
                else {}
            ),
        )


if __name__ == "__main__":
    main()
