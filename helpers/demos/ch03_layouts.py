"""One layout of Chapter 3's planner, measured: step time, tokens/s and peak memory of a Llama.

Chapter 3 ranks layouts with :mod:`helpers.cost.planner`; this demo measures one of them so that
the chapter can compare the planner's order with the measured order. On GPUs it trains with
Colossal-AI's ``HybridParallelPlugin`` (bf16, torch AdamW, eager attention so that sequence
parallelism stays causal, see Chapter 1), on fresh batches
(:func:`helpers.models.llama.token_batch`); on the CPU only the pure data-parallel layout runs,
through ``TorchDDPPlugin`` in fp32 (Colossal-AI 0.5.0 runs nothing else there;
:func:`helpers.train.plugin_step.layouts_plugin`). The step time is the median over ``--steps``
timed steps after ``--warmup``, the slowest rank's (:func:`helpers.train.plugin_step.time_steps`).

    torchrun --nproc_per_node 2 -m helpers.demos.ch03_layouts --tp 2
"""

import math
import statistics

import torch
import torch.distributed as dist

from helpers.models.llama import build_llama, llama_config, llama_params
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch03 import LayoutResult
from helpers.train.plugin_step import layouts_plugin, time_steps

GPU_MODEL = dict(layers=8, hidden=2048, heads=16, vocab=32000, seq=1024, batch=16)
CPU_MODEL = dict(layers=2, hidden=64, heads=4, vocab=256, seq=32, batch=4)


def main() -> None:
    p = cli.parser(__doc__)
    cli.add_all(p, tp=1, pp=1, sp=1)
    cli.add(p, "sp_mode", None, choices=["split_gather", "all_to_all"])
    cli.add(p, "zero", 0)
    cli.add(p, "microbatches", 4)
    p.add_argument(
        "--recompute", action="store_true", help="activation checkpointing (transformers')"
    )
    for key in GPU_MODEL:
        p.add_argument(f"--{key}", type=int, default=None)
    cli.add(p, "steps", 6)
    cli.add(p, "warmup", 2)
    args = p.parse_args()
    with distributed() as env, cli.plugin_lifetime() as keep:
        from colossalai.booster import Booster

        for key, value in (GPU_MODEL if env.is_gpu else CPU_MODEL).items():
            setattr(args, key, getattr(args, key) or value)
        plugin = keep(layouts_plugin(args, env.is_gpu))
        config = llama_config(
            layers=args.layers,
            hidden=args.hidden,
            heads=args.heads,
            vocab=args.vocab,
            max_seq=args.seq,
            attn="eager",
        )
        with torch.device(
            env.device
        ):  # initialise on the GPU: a 0.5 B model takes seconds on a CPU
            model = build_llama(config)
        if args.recompute:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        mesh = getattr(plugin, "pg_mesh", None)
        dp_rank, dp_size = (
            (mesh.coordinate(plugin.dp_axis), mesh.size(plugin.dp_axis))
            if mesh
            else (env.rank, env.world_size)
        )
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        booster = Booster(plugin=plugin)
        model, opt, _, _, _ = booster.boost(model, opt)
        if env.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(env.device)
        times, losses = time_steps(booster, model, opt, args, dp_rank, dp_size, env.device)
        slowest = torch.tensor(times, dtype=torch.float64, device=env.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        cuda = env.device.type == "cuda"
        peak = torch.cuda.max_memory_allocated(env.device) / 2**30 if cuda else 0.0
        peak_t = torch.tensor([peak], device=env.device)
        dist.all_reduce(peak_t, op=dist.ReduceOp.MAX)
        step = statistics.median(slowest.tolist())
        if losses:
            assert all(math.isfinite(x) for x in losses), f"non-finite loss: {losses}"
        if env.rank == 0:
            say(
                f"tp={args.tp} pp={args.pp} sp={args.sp} {args.sp_mode or ''} zero={args.zero} "
                f"recompute={args.recompute}: step {step * 1e3:.1f} ms, "
                f"peak {peak_t.item():.2f} GiB"
            )
        emit(
            LayoutResult,
            tp=args.tp,
            pp=args.pp,
            sp=args.sp,
            sp_mode=args.sp_mode,
            zero=args.zero,
            dp=dp_size,
            microbatches=args.microbatches if args.pp > 1 else 1,
            recompute=args.recompute,
            step_s=step,
            steps=slowest.tolist(),
            tokens_per_s=args.batch * args.seq / step,
            peak_gib=round(peak_t.item(), 3),
            losses=losses,
            params=llama_params(config),
            model={k: getattr(args, k) for k in GPU_MODEL},
            backend=env.backend,
        )
        del model, opt, booster


if __name__ == "__main__":
    main()
