"""Chapter 6 and 8 on GPUs: one Llama step loop under PyTorch FSDP2 or a Colossal-AI plugin.

Used by ``helpers/demos/ch08_train.py`` and by the recorders, which parse their run lists with
:func:`parser`. The layout flags are Chapter 7's :class:`helpers.parallel.train_layout.TrainLayout`;
the model, data and MFU are Chapter 9's (:func:`helpers.train.presets.mfu`). :func:`build` trains a
single-device reference copy on the first ``--ref_steps`` global batches
(:func:`helpers.train.reference.train_reference_mixed`), then wraps the model in FSDP2 or the
layout's plugin; :func:`run` times the steps and, with ``--profile``, splits a few more into
compute and communication (:func:`helpers.train.profiling.breakdown`).
"""

from __future__ import annotations

import copy
import time

import torch

from helpers.parallel.train_layout import TrainLayout, plugin_spec
from helpers.models.llama import build_llama, llama_params, token_batch
from helpers.parallel.vocab import DTYPES
from helpers.run import cli
from helpers.run.env import sync
from helpers.train import levers, speed
from helpers.train.layout_step import Trainer
from helpers.train.presets import mfu
from helpers.train.profiling import breakdown, device_events
from helpers.train.reference import loss_verdict, train_reference_mixed
from helpers.parallel.fsdp2 import FSDP2Trainer
from helpers.train.memory_snapshot import step_memory, trace_intervals


REF_ROWS = 24  # the most sequences the reference holds at once (its fp32 logits alone: 4·N·V B)


def parser():
    """The command line (the recorder's tests parse its run lists with it)."""
    p = cli.parser(__doc__)
    cli.add_layout(p, TrainLayout)
    p.add_argument("--framework", choices=["fsdp2", "colossal"], default="colossal")
    cli.add(p, "steps", 6, help="timed steps")
    cli.add(p, "warmup", 2)
    cli.add(p, "ref_steps", 3)
    cli.add(p, "lr", 3e-4)
    p.add_argument(
        "--overlap", type=int, default=None, help="0/1: the plugin's overlap_communication"
    )
    p.add_argument("--mem_cap_gib", type=float, default=None)
    p.add_argument("--profile", type=int, default=0, help="steps under the PyTorch profiler")
    p.add_argument(
        "--fail_on_divergence",
        type=float,
        default=None,
        metavar="TOL",
        help="exit non-zero when the mean loss is not finite or leaves the reference by more "
        "than TOL",
    )
    speed.add_arguments(p)
    return p


def layout_from(args) -> TrainLayout:
    """The layout of the flags; FSDP2 borrows the 'hybrid' entry (any precision), data parallel
    only."""
    if args.framework == "fsdp2":
        if args.tp * args.pp > 1:
            raise SystemExit("this demo runs FSDP2 as pure sharded data parallelism: --tp 1 --pp 1")
        args.plugin = "hybrid"
    return TrainLayout.from_namespace(args)


def optimizer_name(args, device) -> str:
    """--optim, or the default: HybridAdam for Colossal-AI on GPUs (Gemini accepts only its
    kernels), else AdamW."""
    if args.optim:
        return args.optim
    return "hybrid_adam" if args.framework == "colossal" and device.type == "cuda" else "adamw"


def make_optimizer(model, args, device):
    return speed.make_optimizer(
        optimizer_name(args, device), model.parameters(), args.lr
    )  # AdamW's decay 0.01


def reference_losses(model, layout, args, device) -> list[float]:
    """The single-device reference on the first ``--ref_steps`` global batches, each sliced into
    one rank's micro-batches."""
    batches = [
        {
            k: v.to(device)
            for k, v in token_batch(s, layout.global_batch, layout.seq, layout.shape.vocab).items()
        }
        for s in range(args.ref_steps)
    ]
    chunks = layout.global_batch // layout.micro_batch  # the reference's slices
    while layout.global_batch // chunks > REF_ROWS and layout.global_batch % (2 * chunks) == 0:
        chunks *= 2  # a micro-batch of more than REF_ROWS sequences: the reference accumulates
    return train_reference_mixed(
        copy.deepcopy(model), batches, args.lr, DTYPES[layout.precision], chunks
    )


def model_and_reference(layout, args, env):
    """(model, its config, the single-process reference's losses): the Llama built on the
    rank's device, trained by the reference first when ``args.ref_steps``, then the levers that
    replace parameters applied; the reference's memory is not counted in the run's peak."""
    config = layout.shape.config(attn=layout.attn, max_seq=layout.seq)
    with torch.device(env.device):
        model = build_llama(config)
    reference = reference_losses(model, layout, args, env.device) if args.ref_steps else []
    if env.is_gpu:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(env.device)
    levers.before_wrapping(model, args)
    return model, config, reference


def build(layout, args, env):
    """(trainer, plugin or None, model config, reference losses)."""
    model, config, reference = model_and_reference(layout, args, env)
    if layout.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.framework == "fsdp2":
        # before fully_shard, as torchtitan does: its hooks stay outside graphs
        speed.tune_plain(model, args)
        trainer = FSDP2Trainer(
            layout,
            model,
            lambda m: make_optimizer(m, args, env.device),
            env.device,
            DTYPES[layout.precision],
        )
        return trainer, None, config, reference
    from colossalai.booster import Booster

    import colossalai.booster.plugin as plugins

    name, kwargs = plugin_spec(layout)  # Chapter 7's constructors, as run on the GPU box
    if args.overlap is not None and layout.plugin in ("zero", "hybrid"):
        # ZeRO's gradient reduce during backward
        kwargs["overlap_communication"] = bool(args.overlap)
    kwargs.update(speed.plugin_kwargs(args.plugin_kw))
    plugin = getattr(plugins, name)(**kwargs)
    booster = Booster(plugin=plugin)
    model, opt, _, _, _ = booster.boost(model, make_optimizer(model, args, env.device))
    # after boost: shardformer's policies see the plain modules
    speed.tune_boosted(model, opt, args, kwargs)
    return Trainer(layout, booster, model, opt, env.device, plugin), plugin, config, reference


def time_steps(trainer, args, env) -> tuple[list, float, dict | None, object]:
    """``args.warmup`` steps, ``args.steps`` timed ones and ``args.profile`` profiled ones:
    (every step's loss, seconds per timed step, the profile's breakdown or None, the profiler)."""
    losses, start = [], None
    for k in range(args.warmup + args.steps):
        if k == args.warmup:
            sync(env.device)
            start = time.perf_counter()
        losses.append(trainer.step(k))
    sync(env.device)
    seconds = (time.perf_counter() - start) / args.steps
    if not args.profile:
        return losses, seconds, None, None
    from torch.profiler import ProfilerActivity, profile as torch_profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.is_gpu else [])
    with torch_profile(activities=acts) as prof:
        for k in range(args.profile):
            trainer.step(args.warmup + args.steps + k)
        sync(env.device)
    return losses, seconds, breakdown(prof, "cuda" if env.is_gpu else "cpu", args.profile), prof


def run(layout, args, env) -> dict:
    """Warm-up, timed and profiled steps: losses, reference, speed, MFU, the profile."""
    trainer, plugin, config, reference = build(layout, args, env)
    losses, seconds, profile, prof = time_steps(trainer, args, env)
    if profile is not None and getattr(args, "trace", False) and env.is_gpu:
        try:  # the step's kernels, for a timeline: a figure's data must not fail the run
            profile["trace"] = trace_intervals(device_events(prof, "cuda"))
        except Exception as e:  # noqa: BLE001
            profile["trace"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    memory = None
    if getattr(args, "memory_snapshot", False) and env.is_gpu and plugin is not None:
        timed_peak = torch.cuda.max_memory_allocated(env.device) / 2**30  # marks reset it
        try:
            memory = step_memory(trainer, args.warmup + args.steps + args.profile, env.device)
            memory["timed_peak_gib"] = round(timed_peak, 3)
        except Exception as e:  # noqa: BLE001
            memory = {"error": f"{type(e).__name__}: {e}"[:300]}
    tokens_per_s = layout.global_batch * layout.seq / seconds
    del trainer, plugin
    return dict(
        losses=[None if x is None else round(x, 4) for x in losses],
        reference=[round(x, 4) for x in reference],
        seconds_per_step=round(seconds, 4),
        tokens_per_s=round(tokens_per_s),
        mfu=round(mfu(config, layout.seq, tokens_per_s, env.world_size), 4),
        profile=profile,
        memory_snapshot=memory,
        params=llama_params(config),
    )


def divergence(result: dict, tolerance: float) -> str | None:
    """Why the run's loss does not count (every rank's losses gathered, ``loss_verdict``), or
    None."""
    import torch.distributed as dist

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(
        everyone, {"losses": result.get("losses"), "reference": result.get("reference")}
    )
    verdict = loss_verdict(everyone, tolerance)
    return None if verdict["valid"] else verdict["reason"]


def describe(args, layout, env) -> dict:
    """The run's settings, as its RESULT line reports them (before any number is measured)."""
    return dict(
        framework=args.framework,
        layout=layout.name,
        plugin="fully_shard" if args.framework == "fsdp2" else layout.plugin,
        precision=layout.precision,
        tp=layout.tp,
        pp=layout.pp,
        zero_stage=layout.zero_stage,
        micro_batch=layout.micro_batch,
        microbatches=layout.microbatches,
        global_batch=layout.global_batch,
        seq=layout.seq,
        layers=layout.shape.layers,
        hidden=layout.shape.hidden,
        recompute=layout.recompute,
        overlap=args.overlap,
        optimizer=optimizer_name(args, env.device),
        compiled=args.compile,
        norm_on_device=args.norm_on_device,
        **speed.describe_levers(args),
        plugin_kw=speed.plugin_kwargs(args.plugin_kw),
        gpus=env.world_size,
        oom=False,
        mem_cap_gib=args.mem_cap_gib,
        device=torch.cuda.get_device_name(env.device) if env.is_gpu else "cpu",
    )


def summary_line(args, layout, result: dict) -> str:
    """Rank's one line after the run: speed, MFU and the last losses, or OUT OF MEMORY."""
    if result["oom"]:
        return f"{args.framework} {layout.name}: OUT OF MEMORY"
    return (
        f"{args.framework} {layout.name}: "
        f"{result['tokens_per_s']:,} tokens/s, MFU {result['mfu']:.1%}, "
        f"losses {result['losses'][-2:]} "
        f"(reference {result['reference'][:2]})"
    )
