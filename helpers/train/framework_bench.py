"""Chapter 6's four-framework head-to-head: the timed loop and the rank's main for the frameworks
outside :mod:`helpers.train.framework_run` (DeepSpeed, Megatron-Core).

Colossal-AI and FSDP2 run through :mod:`helpers.demos.ch08_train`; DeepSpeed
(:mod:`helpers.train.deepspeed_bench`) and Megatron-Core (:mod:`helpers.train.megatron_run`) take
the same command line (:func:`helpers.train.framework_run.parser`: the layout, the levers), train
the same Llama on the same token batches with the same single-GPU reference
(:func:`helpers.train.framework_run.reference_losses`), and report the same RESULT fields, so
that :func:`helpers.record.flagship_summary.summarize` reads every row alike. A framework gives
:func:`main` a ``build(layout, args, env) -> (trainer, model config, reference, extra)``; its
trainer's ``step(k)`` trains on global batch ``k`` and returns the mean loss.
"""

from __future__ import annotations


import torch

from helpers.config.schema import TrainConfig
from helpers.models.llama import llama_params
from helpers.parallel.train_layout import TrainLayout
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch08 import FrameworkBenchResult
from helpers.train.framework_run import describe, divergence, parser, time_steps
from helpers.train.layout_step import on_cpu
from helpers.train.presets import mfu


def layout_of(args) -> TrainLayout:
    """The layout of the flags, data parallel only (the bf16 layouts borrow the 'hybrid' entry,
    as FSDP2's do in :func:`helpers.train.framework_run.layout_from`)."""
    if args.tp * args.pp > 1:
        raise SystemExit(f"{args.framework} runs here as data parallelism only: --tp 1 --pp 1")
    args.plugin = "hybrid"
    return TrainLayout.from_namespace(args)


def book_config(layout: TrainLayout, args, zero_stage: int) -> TrainConfig:
    """The book config (Chapter 4's YAML, as a dict) of this run: the model, batch and precision
    of ``layout``, data parallel over its world, ZeRO ``zero_stage``. The converters write it in
    DeepSpeed's and Megatron's terms, so the head-to-head runs what they emit."""
    s = layout.shape
    raw = {
        "parallelism": {"data": layout.world, "zero_stage": zero_stage},
        "train": {
            "batch_size": layout.global_batch,
            "micro_batch_size": layout.micro_batch,
            "learning_rate": args.lr,
            "precision": layout.precision,
            "steps": args.warmup + args.steps + args.profile,
            "seed": 0,
        },
        "model": {
            "kind": "llama",
            "layers": s.layers,
            "hidden": s.hidden,
            "heads": s.heads,
            "kv_heads": s.kv,
            "vocab": s.vocab,
            "seq_len": layout.seq,
        },
    }
    return TrainConfig.from_raw(raw, layout.world)


def timed(trainer, layout, args, env, config, reference) -> dict:
    """Warm-up, timed and profiled steps: losses, reference, speed, MFU, the profile."""
    losses, seconds, profile, _ = time_steps(trainer, args, env)
    tokens_per_s = layout.global_batch * layout.seq / seconds
    return dict(
        losses=[round(x, 4) for x in losses],
        reference=[round(x, 4) for x in reference],
        seconds_per_step=round(seconds, 4),
        tokens_per_s=round(tokens_per_s),
        mfu=round(mfu(config, layout.seq, tokens_per_s, env.world_size), 4),
        profile=profile,
        params=llama_params(config),
    )


def main(framework: str, build, cpu: bool = True, flags=None) -> None:
    """A rank of ``framework``'s run: parse, build, time, check the loss, emit one RESULT.

    ``cpu``: whether the framework runs on the gloo path (fp32, the tiny shape of
    :func:`helpers.train.layout_step.on_cpu`); otherwise a CPU placement stops with the reason.
    ``flags(parser)``: the framework's own flags."""
    p = parser()
    p.set_defaults(framework=framework)  # not one of ch08_train's --framework choices
    if flags:
        flags(p)
    args = p.parse_args()
    with distributed(timeout_s=300) as env:
        layout = layout_of(args)
        if not env.is_gpu:
            if not cpu:
                cli.require_gpu(env, framework)
            layout = on_cpu(layout, precision="fp32")
        layout = TrainLayout.from_dict({**layout.__dict__, "world": env.world_size})
        result = describe(args, layout, env)
        if env.is_gpu:
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.cuda.reset_peak_memory_stats(env.device)
        try:
            trainer, config, reference, extra = build(layout, args, env)
            result.update(extra)
            result.update(timed(trainer, layout, args, env, config, reference))
        except torch.OutOfMemoryError as e:
            result.update(oom=True, error=str(e).splitlines()[0][:300])
        if env.is_gpu:
            result["peak_mib"] = round(torch.cuda.max_memory_allocated(env.device) / 2**20, 1)
            result["reserved_mib"] = round(torch.cuda.max_memory_reserved(env.device) / 2**20, 1)
        if result["oom"]:
            say(f"{framework} {layout.name}: OUT OF MEMORY")
        else:
            say(
                f"{framework}: {result['tokens_per_s']:,} tokens/s, MFU {result['mfu']:.1%}, "
                f"losses {result['losses'][-2:]} (reference {result['reference'][:2]})"
            )
        check = args.fail_on_divergence is not None and not result["oom"]
        reason = divergence(result, args.fail_on_divergence) if check else None
        if reason:
            say(f"the loss check failed: {reason}")
        emit(FrameworkBenchResult, **result)
        if reason:
            raise SystemExit(1)
