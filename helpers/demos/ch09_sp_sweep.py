"""Chapter 9: one layout, increasing sequence length, until the GPU runs out of memory.

    torchrun --nproc_per_node 2 -m helpers.demos.ch09_sp_sweep --tp 2             # no SP
    ... --tp 2 --sp_mode split_gather                                             # Megatron SP
    ... --sp 2 --sp_mode all_to_all                                               # Ulysses

The plugin (bf16, no ZeRO) and model are built once (:mod:`helpers.train.seq_sweep`; the model of
Chapter 9's presets, eager attention with an explicit causal mask, which sequence
parallelism needs without flash-attn); then for each length in ``--seqs`` a few training steps
run on one sequence per step and rank 0 emits that length's tokens/s and peak memory at once,
so a later hang cannot lose it. ``torch.cuda.OutOfMemoryError`` is caught inside the rank and
reported as ``oom`` for that length; the sweep stops there. The ranks of a tensor/sequence group
hold tensors of the same shapes, so they run out of memory at the same allocation and meet again
at the barrier that follows.
"""

import gc
import importlib.util

import torch
import torch.distributed as dist

from helpers.models.llama import build_llama, llama_config
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch09 import SpSweepResult
from helpers.train.presets import PRESETS, mfu
from helpers.train.seq_sweep import out_of_memory, parser, steps_at, sweep_plugin


def main() -> None:
    args = parser().parse_args()
    seqs = [int(s) for s in args.seqs.split(",")]
    with distributed(timeout_s=300) as env, cli.plugin_lifetime() as keep:
        cli.require_gpu(env, "HybridParallelPlugin")
        from colossalai.booster import Booster

        flash = importlib.util.find_spec("flash_attn") is not None
        config = llama_config(**PRESETS[args.preset], max_seq=max(seqs), attn="eager")
        with torch.device(env.device):
            model = build_llama(config)
        plugin = keep(sweep_plugin(args.tp, args.sp, args.sp_mode))
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
                if row["oom"]:
                    say(f"{name} seq {seq}: out of memory")
                else:
                    say(
                        f"{name} seq {seq}: {row['tokens_per_s']:,} tokens/s, "
                        f"peak {row['peak_mib']:,.0f} MiB"
                    )
                emit(SpSweepResult, **row)
            if row["oom"]:
                break
        del model, opt, booster


if __name__ == "__main__":
    main()
