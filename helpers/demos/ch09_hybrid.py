"""Chapter 9: the hybrid-parallel Llama benchmark (Colossal-AI's benchmark.py flags) on GPUs.

    torchrun --nproc_per_node 2 -m helpers.demos.ch09_hybrid --tp 2 --precision bf16
    ... --tp 1 --pp 2 --mbs 4 | --sp 2 --sp_mode all_to_all | --tp 2 --sp_mode split_gather
    ... --zero 1

Builds on Chapter 1's demo (:mod:`helpers.train.plugin_step`: the plugin from the same flags;
:mod:`helpers.train.reference`: the mixed-precision single-GPU reference) with a model large
enough to measure (:data:`helpers.train.presets.PRESETS`): every rank trains a reference copy on
the first ``--ref_steps`` global batches, then the plugin trains ``--steps`` batches
(:func:`helpers.train.benchmark.train_hybrid`); the result carries tokens/s, MFU
(:func:`helpers.train.presets.mfu`, the book's one definition), peak memory and both loss curves.

``--repeat`` trains on one repeated batch (the known NaN of tp=2 bf16 near zero loss) and
``--watch`` records, per step, the loss, the largest |logit|, whether logits and gradients are
finite, and the global gradient norm, so the first non-finite step shows where it starts.
"""

import copy

import torch

from helpers.models.llama import build_llama, llama_config, llama_params, token_batch
from helpers.parallel.vocab import DTYPES
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch09 import HybridResult
from helpers.train.benchmark import microbatches, parser, train_hybrid
from helpers.train.presets import PRESETS, mfu
from helpers.train.reference import train_reference_mixed

NO_CPU = "on the CPU Colossal-AI's CpuAccelerator has no get_rng_state"


def main() -> None:
    args = parser().parse_args()
    with distributed(timeout_s=300) as env, cli.plugin_lifetime() as keep:
        cli.require_gpu(env, "HybridParallelPlugin", NO_CPU)
        torch.backends.cuda.matmul.allow_tf32 = False
        args.microbatches = microbatches(args, env.world_size)
        config = llama_config(**PRESETS[args.preset], max_seq=args.seq, attn="eager")
        # same seed, same device type: identical weights on every rank
        with torch.device(env.device):
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
        losses, seconds, layout, watched, plugin = train_hybrid(model, batches, args, env.device)
        keep(plugin)
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
                f"{reference[:1]} → {reference[-1:]}, {tokens_per_s:,.0f} tokens/s, "
                f"MFU {result['mfu']:.1%}, "
                f"peak {result['peak_mib']:,.0f} MiB"
            )
        emit(HybridResult, **result)


if __name__ == "__main__":
    main()
