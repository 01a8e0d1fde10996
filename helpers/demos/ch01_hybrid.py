"""Chapter 1, "the same with Colossal-AI": tp, pp and sp through HybridParallelPlugin (GPUs).

One layout per launch, e.g. ``--tp 2``, ``--pp 2``, ``--sp 2 --sp_mode all_to_all`` or
``--tp 2 --sp_mode split_gather``. Every rank first trains a single-device reference copy of the
same tiny Llama on the same fresh batches; then the plugin shards the model and trains it. The
losses of both are compared step by step and the demo fails if they drift apart.

Colossal-AI 0.5.0 runs HybridParallelPlugin on CUDA only (on CPU, CpuAccelerator.get_rng_state
is missing): on a CPU machine the demo stops with that explanation
(:func:`helpers.run.cli.require_gpu`). The plugin and the loop: :mod:`helpers.train.plugin_step`.
"""

import copy

import torch

from helpers.models.llama import build_llama, llama_config, token_batch
from helpers.parallel.vocab import DTYPES
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch01 import HybridResult
from helpers.train.plugin_step import train_plugin
from helpers.train.reference import train_reference_mixed

BF16_WINDOW = 8
NO_CPU = "on the CPU Colossal-AI's CpuAccelerator has no get_rng_state"


def main() -> None:
    p = cli.parser()
    cli.add_all(p, tp=1, pp=1, sp=1)
    cli.add(p, "sp_mode", None, choices=["split_gather", "ring", "all_to_all"])
    cli.add_all(p, zero=0, microbatches=2, precision="fp32", steps=20, batch=8, seq=256, lr=1e-3)
    p.add_argument(
        "--attn",
        choices=["eager", "sdpa"],
        default="eager",
        help="transformers attention; 'sdpa' reproduces the lost causal mask under SP",
    )
    p.add_argument(
        "--expect_drift",
        action="store_true",
        help="assert the loss does NOT match the reference (a documented trap)",
    )
    args = p.parse_args()
    with distributed() as env, cli.plugin_lifetime() as keep:
        cli.require_gpu(env, "HybridParallelPlugin", NO_CPU)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        config = llama_config(layers=4, hidden=256, heads=8, vocab=128, attn=args.attn)
        model = build_llama(config).to(env.device)
        batches = [
            token_batch(k, args.batch, args.seq, config.vocab_size) for k in range(args.steps)
        ]
        on_device = [{k: v.to(env.device) for k, v in b.items()} for b in batches]
        reference = train_reference_mixed(
            copy.deepcopy(model), on_device, args.lr, DTYPES[args.precision]
        )
        torch.cuda.reset_peak_memory_stats(env.device)
        losses, seconds, memory, info, plugin = train_plugin(model, batches, args, env.device)
        keep(plugin)
        tokens = args.batch * args.seq
        result = dict(
            layout=info,
            precision=args.precision,
            sp_mode=args.sp_mode,
            zero=args.zero,
            attn=args.attn,
            steps=args.steps,
            batch=args.batch,
            seq=args.seq,
            gpu=torch.cuda.get_device_name(env.device),
            tokens_per_s=round(tokens / seconds),
            peak_mib=round(memory, 1),
        )
        if info["last_stage"]:
            # fp32: every step must agree. 16-bit: rounding shifts the moment the loss plunges
            # (the bf16 and fp32 references themselves differ by ~0.05 there), so the check
            # covers the first BF16_WINDOW steps and the rest is shown, not asserted.
            window = args.steps if args.precision == "fp32" else min(BF16_WINDOW, args.steps)
            worst = max(abs(a - b) for a, b in zip(losses[:window], reference[:window]))
            result.update(
                losses=[round(x, 4) for x in losses],
                reference=[round(x, 4) for x in reference],
                max_diff=worst,
                checked_steps=window,
                max_diff_all=max(abs(a - b) for a, b in zip(losses, reference)),
            )
            tol = 2e-3 if args.precision == "fp32" else 3e-2
            verdict = "drifts, as expected for this trap" if args.expect_drift else "matches"
            say(
                f"{info}: final loss {losses[-1]:.4f} vs reference {reference[-1]:.4f} "
                f"(max diff {worst:.1e}, tol {tol:g}): {verdict}"
            )
            if args.expect_drift:
                assert worst > 10 * tol, (
                    f"expected a drift from the reference, got only {worst:.2e}"
                )
            else:
                assert worst < tol, (
                    f"parallel loss drifts from the single-GPU reference by {worst:.2e}"
                )
            result.update(expect_drift=args.expect_drift)
        emit(HybridResult, **result)


if __name__ == "__main__":
    main()
