"""Chapter 9: one layout, increasing sequence length, until the GPU runs out of memory.

    torchrun --nproc_per_node 2 -m helpers.demos.ch09_sp_sweep --tp 2                         # no SP
    torchrun --nproc_per_node 2 -m helpers.demos.ch09_sp_sweep --tp 2 --sp_mode split_gather  # Megatron SP
    torchrun --nproc_per_node 2 -m helpers.demos.ch09_sp_sweep --sp 2 --sp_mode all_to_all    # Ulysses

The plugin (bf16, no ZeRO) and model are built once (the model of
``ch09_hybrid``'s presets, eager attention with an explicit causal mask, which sequence
parallelism needs without flash-attn); then for each length in ``--seqs`` a few training steps
run on one sequence per step and rank 0 emits that length's tokens/s and peak memory at once,
so a later hang cannot lose it. ``torch.cuda.OutOfMemoryError`` is caught inside the rank and
reported as ``oom`` for that length; the sweep stops there. The ranks of a tensor/sequence group
hold tensors of the same shapes, so they run out of memory at the same allocation and meet again
at the barrier that follows.
"""

import argparse
import gc
import importlib.util
import time

import torch
import torch.distributed as dist

from helpers.demos.ch09_hybrid import PRESETS, mfu
from helpers.run.env import distributed, emit, say, sync
from helpers.models.llama import build_llama, llama_config, token_batch


def sweep_plugin(tp: int, sp: int, sp_mode: str | None):
    """bf16, no ZeRO; sp_size only where the mode has its own axis (all_to_all, ring_attn)."""
    from colossalai.booster.plugin import HybridParallelPlugin

    return HybridParallelPlugin(
        tp_size=tp,
        pp_size=1,
        sp_size=sp if sp_mode in ("all_to_all", "ring_attn") else None,
        enable_sequence_parallelism=sp_mode is not None,
        sequence_parallelism_mode=sp_mode,
        precision="bf16",
        zero_stage=0,
        max_norm=0.0,
    )


def out_of_memory(e: BaseException) -> bool:
    """torch's OutOfMemoryError, or a library's allocation failure reported as a RuntimeError."""
    text = str(e)
    return (
        isinstance(e, torch.cuda.OutOfMemoryError)
        or "out of memory" in text
        or "ALLOC_FAILED" in text
    )


def steps_at(model, booster, opt, seq: int, steps: int, vocab: int, device) -> float:
    """Seconds per step at this length (the first step untimed)."""
    start = None
    for k in range(steps):
        if k == 1:
            sync(device)
            start = time.perf_counter()
        batch = {n: t.to(device) for n, t in token_batch(k, 1, seq, vocab).items()}
        loss = model(**batch).loss
        booster.backward(loss, opt)
        opt.step()
        opt.zero_grad()
    sync(device)
    return (time.perf_counter() - start) / (steps - 1)


def parser() -> argparse.ArgumentParser:
    """The command line (the recorder's tests parse its run lists with it)."""
    p = argparse.ArgumentParser()
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--sp", type=int, default=1)
    p.add_argument(
        "--sp_mode", choices=["split_gather", "ring", "all_to_all", "ring_attn"], default=None
    )
    p.add_argument("--preset", choices=list(PRESETS), default="half")
    p.add_argument("--seqs", default="2048,4096,8192,16384,32768,65536")
    p.add_argument("--steps", type=int, default=3)
    return p


def main() -> None:
    args = parser().parse_args()
    seqs = [int(s) for s in args.seqs.split(",")]
    with distributed(timeout_s=300) as env:
        if not env.is_gpu:
            raise SystemExit(
                "HybridParallelPlugin needs one CUDA GPU per rank in Colossal-AI 0.5.0"
            )
        from colossalai.booster import Booster

        flash = importlib.util.find_spec("flash_attn") is not None
        config = llama_config(**PRESETS[args.preset], max_seq=max(seqs), attn="eager")
        with torch.device(env.device):
            model = build_llama(config)
        plugin = sweep_plugin(args.tp, args.sp, args.sp_mode)
        booster = Booster(plugin=plugin)
        model, opt, _, _, _ = booster.boost(model, torch.optim.AdamW(model.parameters(), lr=1e-4))
        name = (
            f"tp={args.tp}"
            + (f" sp={args.sp}" if args.sp > 1 else "")
            + f" {args.sp_mode or 'no SP'}"
        )
        for seq in seqs:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(env.device)
            row = dict(
                layout=name,
                sp_mode=args.sp_mode,
                tp=args.tp,
                sp=args.sp,
                seq=seq,
                preset=args.preset,
                flash_attn_available=flash,
            )
            try:
                seconds = steps_at(
                    model, booster, opt, seq, args.steps, config.vocab_size, env.device
                )
                row.update(
                    oom=False,
                    tokens_per_s=round(seq / seconds),
                    mfu=round(mfu(config, seq, seq / seconds, env.world_size), 4),
                    peak_mib=round(torch.cuda.max_memory_allocated(env.device) / 2**20, 1),
                )
            except RuntimeError as e:  # torch.cuda.OutOfMemoryError is a RuntimeError
                if not out_of_memory(e):
                    raise
                row.update(
                    oom=True,
                    error=str(e).split("\n")[0][:160],
                    peak_mib=round(torch.cuda.max_memory_allocated(env.device) / 2**20, 1),
                )
            opt.zero_grad()
            gc.collect()
            torch.cuda.empty_cache()
            dist.barrier()
            if env.rank == 0:
                say(
                    f"{name} seq {seq}: "
                    + (
                        "out of memory"
                        if row["oom"]
                        else f"{row['tokens_per_s']:,} tokens/s, peak {row['peak_mib']:,.0f} MiB"
                    )
                )
                emit(**row)
            if row["oom"]:
                break
        del model, opt, booster
        del plugin


if __name__ == "__main__":
    main()
