"""Chapter 6 and 8 on GPUs: one Llama step loop under PyTorch FSDP2 or a Colossal-AI plugin.

    torchrun --nproc_per_node 2 -m helpers.demos.ch08_train --framework fsdp2 --precision bf16 ...
    ... --framework colossal --plugin zero --zero_stage 2 | --plugin hybrid --tp 2 [--overlap 0]
    ... --mem_cap_gib 10    (the out-of-memory lab: this process may use only 10 GiB of the GPU)
    ... --profile 2         (the PyTorch profiler over 2 steps: compute vs communication per rank)
    ... --compile --optim adamw_fused --plugin_kw reduce_bucket_size_in_m=128   (the flagship run's knobs, helpers.train.speed)

The layout flags are Chapter 7's :class:`helpers.config.layout.TrainLayout` (its plugins ran on
the 2×H200 box); the model, data and MFU definition are Chapter 9's (``ch09_hybrid.mfu``:
(6N + 12·L·h·s)·tokens / (time · GPUs · 989.5e12)). Every rank first trains a single-device
reference copy on the first ``--ref_steps`` global batches; with ``--fail_on_divergence 0.05`` the run
exits non-zero (after printing its results) when the mean loss is not finite or leaves that
reference by more than 0.05 (the flagship passes it; the Gemini NaN run is recorded without it).
An out-of-memory error is caught
and reported (``oom: true`` with the peak reached) instead of failing the run.
On CPU (gloo) FSDP2 and Colossal-AI's TorchDDPPlugin run in fp32: the tests use that path.
"""

import argparse
import copy
import time

import torch

from helpers.demos.ch01_hybrid import DTYPES, train_reference_mixed
from helpers.demos.ch07_memory import Trainer
from helpers.demos.ch09_hybrid import mfu
from helpers.train import speed
from helpers.run.env import distributed, emit, say, sync
from helpers.parallel.fsdp2 import FSDP2Trainer
from helpers.config.layout import CPU_SHAPE, TrainLayout, plugin_spec
from helpers.train.profiling import breakdown
from helpers.record.runner import loss_verdict
from helpers.models.llama import build_llama, llama_params, token_batch


def optimizer_name(args, device) -> str:
    """--optim, or the default: HybridAdam for Colossal-AI on GPUs (Gemini accepts only its kernels), else AdamW."""
    if args.optim:
        return args.optim
    return "hybrid_adam" if args.framework == "colossal" and device.type == "cuda" else "adamw"


def make_optimizer(model, args, device):
    return speed.make_optimizer(
        optimizer_name(args, device), model.parameters(), args.lr
    )  # AdamW's decay 0.01


def build(layout, args, env):
    config = layout.shape.config(attn=layout.attn, max_seq=layout.seq)
    with torch.device(env.device):
        model = build_llama(config)
    reference = []
    if args.ref_steps:
        batches = [
            {
                k: v.to(env.device)
                for k, v in token_batch(
                    s, layout.global_batch, layout.seq, layout.shape.vocab
                ).items()
            }
            for s in range(args.ref_steps)
        ]
        chunks = (
            layout.global_batch // layout.micro_batch
        )  # the reference's slices: one rank's micro-batch
        reference = train_reference_mixed(
            copy.deepcopy(model), batches, args.lr, DTYPES[layout.precision], chunks
        )
        del batches
    if env.is_gpu:  # the reference's memory is not the layout's
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(env.device)
    if layout.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.framework == "fsdp2":
        if (
            args.compile
        ):  # before fully_shard, as torchtitan does: FSDP2's hooks stay outside the graphs
            speed.compile_layers(model)
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
        kwargs["overlap_communication"] = bool(
            args.overlap
        )  # ZeRO's gradient reduce during backward
    kwargs.update(speed.plugin_kwargs(args.plugin_kw))
    plugin = getattr(plugins, name)(**kwargs)
    booster = Booster(plugin=plugin)
    model, opt, _, _, _ = booster.boost(model, make_optimizer(model, args, env.device))
    speed.tune_boosted(
        model, opt, args, kwargs
    )  # after boost: shardformer's policies see the plain modules
    return Trainer(layout, booster, model, opt, env.device, plugin), plugin, config, reference


def run(layout, args, env) -> dict:
    trainer, plugin, config, reference = build(layout, args, env)
    losses, start, prof_steps = [], None, []
    for k in range(args.warmup + args.steps):
        if k == args.warmup:
            sync(env.device)
            start = time.perf_counter()
        losses.append(trainer.step(k))
    sync(env.device)
    seconds = (time.perf_counter() - start) / args.steps
    profile = None
    if args.profile:
        from torch.profiler import ProfilerActivity, profile as torch_profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if env.is_gpu else [])
        with torch_profile(activities=acts) as prof:
            for k in range(args.profile):
                trainer.step(args.warmup + args.steps + k)
            sync(env.device)
        profile = breakdown(prof, "cuda" if env.is_gpu else "cpu", args.profile)
    tokens_per_s = layout.global_batch * layout.seq / seconds
    del trainer, plugin
    return dict(
        losses=[None if x is None else round(x, 4) for x in losses],
        reference=[round(x, 4) for x in reference],
        seconds_per_step=round(seconds, 4),
        tokens_per_s=round(tokens_per_s),
        mfu=round(mfu(config, layout.seq, tokens_per_s, env.world_size), 4),
        profile=profile,
        params=llama_params(config),
    )


def divergence(result: dict, tolerance: float) -> str | None:
    """Why the run's loss does not count (every rank's losses gathered, ``loss_verdict``), or None."""
    import torch.distributed as dist

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(
        everyone, {"losses": result.get("losses"), "reference": result.get("reference")}
    )
    verdict = loss_verdict(everyone, tolerance)
    return None if verdict["valid"] else verdict["reason"]


def parser() -> argparse.ArgumentParser:
    """The command line (the recorder's tests parse its run lists with it)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    TrainLayout.add_arguments(p)
    p.add_argument("--framework", choices=["fsdp2", "colossal"], default="colossal")
    p.add_argument("--steps", type=int, default=6, help="timed steps")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--ref_steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-4)
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
        help="exit non-zero when the mean loss is not finite or leaves the reference by more than TOL",
    )
    speed.add_arguments(p)
    return p


def layout_from(args) -> TrainLayout:
    """The layout of the flags; FSDP2 borrows the 'hybrid' entry (any precision), data parallel only."""
    if args.framework == "fsdp2":
        if args.tp * args.pp > 1:
            raise SystemExit("this demo runs FSDP2 as pure sharded data parallelism: --tp 1 --pp 1")
        args.plugin = "hybrid"
    return TrainLayout.from_namespace(args)


def main() -> None:
    args = parser().parse_args()
    with distributed(timeout_s=120) as env:
        layout = layout_from(args)
        if not env.is_gpu:  # the gloo path: fp32, FSDP2 or TorchDDPPlugin, a tiny model
            if args.framework == "colossal" and layout.plugin != "ddp":
                raise SystemExit(
                    f"{layout.plugin} needs one CUDA GPU per rank in Colossal-AI 0.5.0; on CPU "
                    "only --plugin ddp (TorchDDPPlugin, fp32) runs"
                )
            layout = TrainLayout.from_dict(
                {
                    **layout.__dict__,
                    "shape": CPU_SHAPE,
                    "precision": "fp32",
                    "seq": min(layout.seq, 64),
                    "micro_batch": min(layout.micro_batch, 2),
                }
            )
        layout = TrainLayout.from_dict({**layout.__dict__, "world": env.world_size})
        result = dict(
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
            plugin_kw=speed.plugin_kwargs(args.plugin_kw),
            gpus=env.world_size,
            oom=False,
            mem_cap_gib=args.mem_cap_gib,
            device=torch.cuda.get_device_name(env.device) if env.is_gpu else "cpu",
        )
        if env.is_gpu:
            torch.backends.cuda.matmul.allow_tf32 = False
            if args.mem_cap_gib:
                total = torch.cuda.get_device_properties(env.device).total_memory
                torch.cuda.set_per_process_memory_fraction(
                    args.mem_cap_gib * 2**30 / total, env.device
                )
            torch.cuda.reset_peak_memory_stats(env.device)
        try:
            result.update(run(layout, args, env))
        except torch.OutOfMemoryError as e:  # the lab's "before": report it, do not crash
            result.update(oom=True, error=str(e).splitlines()[0][:300])
        if env.is_gpu:
            result["peak_mib"] = round(torch.cuda.max_memory_allocated(env.device) / 2**20, 1)
            result["reserved_mib"] = round(torch.cuda.max_memory_reserved(env.device) / 2**20, 1)
        say(
            f"{args.framework} {layout.name}: "
            + (
                "OUT OF MEMORY"
                if result["oom"]
                else f"{result['tokens_per_s']:,} tokens/s, MFU {result['mfu']:.1%}, losses {result['losses'][-2:]} "
                f"(reference {result['reference'][:2]})"
            )
        )
        check = args.fail_on_divergence is not None and not result["oom"]
        reason = divergence(result, args.fail_on_divergence) if check else None
        if (
            reason
        ):  # on stdout, before the RESULT line: a rank's last stderr line can be lost at exit
            say(f"the loss check failed: {reason}")
        emit(**result)
        if reason:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
