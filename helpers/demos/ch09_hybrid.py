"""Chapter 9: the hybrid-parallel Llama benchmark (Colossal-AI's benchmark.py flags) on GPUs.

    torchrun --nproc_per_node 2 -m helpers.demos.ch09_hybrid --tp 2 --precision bf16
    ... --tp 1 --pp 2 --mbs 4 | --sp 2 --sp_mode all_to_all | --tp 2 --sp_mode split_gather | --zero 1

Builds on Chapter 1's demo (``helpers/demos/ch01_hybrid.py``: the plugin from the same flags, the
mixed-precision single-GPU reference) with a model large enough to measure: every rank trains a
reference copy on the first ``--ref_steps`` global batches, then the plugin trains ``--steps``
batches; the result carries tokens/s, MFU, peak memory and both loss curves.

MFU (one definition for the whole book): model FLOPs per token (6N + 12·L·h·s) × tokens/s /
(GPUs × 989.5e12), with N the parameters that do matrix multiplications (all but the input
embedding table), L layers, h hidden size, s sequence length; attention counted causal-unaware
(PaLM, Chowdhery et al. 2022, App. B) and no recomputation; 989.5 TFLOP/s = H100/H200 dense bf16.

``--repeat`` trains on one repeated batch (the known NaN of tp=2 bf16 near zero loss) and
``--watch`` records, per step, the loss, the largest |logit|, whether logits and gradients are
finite, and the global gradient norm, so the first non-finite step shows where it starts.
"""

import argparse
import copy
import time

import torch
import torch.distributed as dist

from helpers.demos.ch01_hybrid import DTYPES, make_plugin, plugin_step, train_reference_mixed
from helpers.run.env import distributed, emit, say, sync
from helpers.cost.mfu import H200_BF16_PEAK, mfu as book_mfu
from helpers.cost.mfu import flops_per_token as model_flops_per_token
from helpers.models.llama import build_llama, llama_config, llama_params, shard_batch, token_batch

PEAK_FLOPS = H200_BF16_PEAK  # H100/H200 SXM dense bf16 (helpers.cost.mfu)
PRESETS = {  # name: llama_config kwargs
    "tiny": dict(layers=4, hidden=256, heads=8, vocab=128),
    "1b": dict(layers=16, hidden=2048, heads=16, vocab=32000),  # 0.94 B, known-facts' model
    "half": dict(layers=8, hidden=2048, heads=16, vocab=32000),  # 0.54 B
}


def flops_per_token(config, seq: int) -> float:
    """helpers.cost.mfu's 6N + 12·L·h·s with N = the parameters that do matmuls (all but the input
    embedding, which is a lookup)."""
    n = llama_params(config) - config.vocab_size * config.hidden_size
    return model_flops_per_token(n, config.num_hidden_layers, config.hidden_size, seq)


def mfu(config, seq: int, tokens_per_s: float, gpus: int) -> float:
    """The book's one MFU (helpers.cost.mfu.mfu) for a Llama config; 0 when nothing was measured."""
    return book_mfu(tokens_per_s, flops_per_token(config, seq), gpus) if tokens_per_s > 0 else 0.0


def make_optimizer(model, lr: float, name: str):
    if name == "hybrid_adam":
        from colossalai.nn.optimizer import HybridAdam

        return HybridAdam(
            model.parameters(), lr=lr, weight_decay=0.01
        )  # = torch AdamW's default decay
    return torch.optim.AdamW(model.parameters(), lr=lr)


def watch_step(model, out, group) -> dict:
    """Logit and gradient health after a backward (working parameters' .grad; None under ZeRO)."""
    logits = out.logits.detach()
    sq, bad = torch.zeros((), device=logits.device, dtype=torch.float64), []
    for name, p in model.named_parameters():
        if p.grad is not None:
            sq += p.grad.detach().double().pow(2).sum()
            if not torch.isfinite(p.grad).all():
                bad.append(name)
    dist.all_reduce(sq, group=group)
    return dict(
        logit_absmax=float(logits.float().abs().max()),
        logits_finite=bool(torch.isfinite(logits).all()),
        grad_norm=float(sq.sqrt()),
        nonfinite_grads=bad[:4],
    )


def train(model, batches, args, device):
    from colossalai.booster import Booster

    plugin = make_plugin(args)
    plugin.shard_config.parallel_output = bool(
        args.parallel_output
    )  # read when the model is sharded
    booster = Booster(plugin=plugin)
    mesh = plugin.pg_mesh
    dp_rank, dp_size = mesh.coordinate(plugin.dp_axis), mesh.size(plugin.dp_axis)
    model, opt, _, _, _ = booster.boost(model, make_optimizer(model, args.lr, args.optim))
    last_stage = bool(args.pp == 1 or plugin.stage_manager.is_last_stage())
    losses, watched, start = [], [], None
    for k, full in enumerate(batches):
        if k == args.warmup:
            sync(device)
            start = time.perf_counter()
        batch = {n: t.to(device) for n, t in shard_batch(full, dp_rank, dp_size).items()}
        loss, out = plugin_step(booster, model, opt, batch, args.pp > 1, last_stage, device)
        if args.watch and out is not None:  # gradients are there until the optimizer step
            watched.append(dict(step=k, loss=loss.item(), **watch_step(model, out, None)))
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().float().clone())
    sync(device)
    seconds = (time.perf_counter() - start) / (len(batches) - args.warmup)
    values = torch.stack(losses)
    if dp_size > 1:  # the mean over data-parallel replicas, on the last stage
        dist.all_reduce(values, group=mesh.get_group_along_axis(plugin.dp_axis))
        values /= dp_size
    layout = dict(
        dp=int(dp_size),
        tp=int(plugin.tp_size),
        pp=int(plugin.pp_size),
        sp=int(plugin.sp_size),
        last_stage=last_stage,
    )  # plain ints: numpy integers are not JSON
    del model, opt, booster
    return values.tolist(), seconds, layout, watched, plugin


def parser() -> argparse.ArgumentParser:
    """The command line (the recorder's tests parse its run lists with it)."""
    p = argparse.ArgumentParser()
    for flag in ("--tp", "--pp", "--sp"):
        p.add_argument(flag, type=int, default=1)
    p.add_argument(
        "--sp_mode", choices=["split_gather", "ring", "all_to_all", "ring_attn"], default=None
    )
    p.add_argument("--zero", type=int, default=0)
    p.add_argument("--mbs", type=int, default=1, help="pipeline micro-batch size (pp > 1)")
    p.add_argument("--precision", choices=list(DTYPES), default="bf16")
    p.add_argument("--preset", choices=list(PRESETS), default="1b")
    p.add_argument("--batch", type=int, default=16, help="global batch (sequences per step)")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2, help="untimed first steps")
    p.add_argument(
        "--ref_steps", type=int, default=4, help="steps compared with the single-GPU reference"
    )
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--optim", choices=["adamw", "hybrid_adam"], default="adamw")
    p.add_argument(
        "--repeat", action="store_true", help="train on batch 0 every step (memorisation)"
    )
    p.add_argument(
        "--watch", action="store_true", help="record logit/gradient health every step (pp=1)"
    )
    p.add_argument(
        "--parallel_output", type=int, default=1, help="0: gather the vocab-parallel logits"
    )
    return p


def main() -> None:
    args = parser().parse_args()
    with distributed(timeout_s=300) as env:
        if not env.is_gpu:
            raise SystemExit(
                "HybridParallelPlugin needs one CUDA GPU per rank in Colossal-AI 0.5.0 "
                "(on CPU: CpuAccelerator.get_rng_state is missing, upstream issue #5211)"
            )
        torch.backends.cuda.matmul.allow_tf32 = False
        local = args.batch // max(
            1,
            env.world_size
            // (
                args.tp * args.pp * (args.sp if args.sp_mode in ("all_to_all", "ring_attn") else 1)
            ),
        )
        args.microbatches = max(1, local // args.mbs)
        config = llama_config(**PRESETS[args.preset], max_seq=args.seq, attn="eager")
        with torch.device(
            env.device
        ):  # same seed, same device type: identical weights on every rank
            model = build_llama(config)
        batches = [
            token_batch(0 if args.repeat else k, args.batch, args.seq, config.vocab_size)
            for k in range(args.steps)
        ]
        reference = []
        if args.ref_steps:
            on_device = [
                {k: v.to(env.device) for k, v in b.items()} for b in batches[: args.ref_steps]
            ]
            reference = train_reference_mixed(
                copy.deepcopy(model), on_device, args.lr, DTYPES[args.precision]
            )
            del on_device
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(env.device)
        losses, seconds, layout, watched, plugin = train(model, batches, args, env.device)
        tokens_per_s = args.batch * args.seq / seconds
        result = dict(
            layout=layout,
            precision=args.precision,
            sp_mode=args.sp_mode,
            zero=args.zero,
            mbs=args.mbs,
            preset=args.preset,
            params=llama_params(config),
            batch=args.batch,
            seq=args.seq,
            steps=args.steps,
            optim=args.optim,
            repeat=args.repeat,
            parallel_output=bool(args.parallel_output),
            gpus=env.world_size,
            gpu=torch.cuda.get_device_name(env.device),
            seconds_per_step=round(seconds, 4),
            tokens_per_s=round(tokens_per_s),
            mfu=round(mfu(config, args.seq, tokens_per_s, env.world_size), 4),
            peak_mib=round(torch.cuda.max_memory_allocated(env.device) / 2**20, 1),
        )
        if layout["last_stage"]:
            diffs = [abs(a - b) for a, b in zip(losses, reference)]
            result.update(
                losses=[round(x, 4) for x in losses],
                reference=[round(x, 4) for x in reference],
                max_diff=max(diffs) if diffs else None,
                finite=all(x == x and abs(x) != float("inf") for x in losses),
                watch=watched,
            )
            say(
                f"{layout} {args.precision}: loss {losses[0]:.3f} → {losses[-1]:.3f}, reference "
                f"{reference[:1]} → {reference[-1:]}, {tokens_per_s:,.0f} tokens/s, MFU {result['mfu']:.1%}, "
                f"peak {result['peak_mib']:,.0f} MiB"
            )
        emit(**result)
        del plugin


if __name__ == "__main__":
    main()
