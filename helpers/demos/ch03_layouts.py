"""One layout of Chapter 3's planner, measured: step time, tokens/s and peak memory of a Llama.

Chapter 3 ranks layouts with :mod:`helpers.cost.planner`; this demo measures one of them so that the
chapter can compare the planner's order with the measured order. On GPUs it trains with
Colossal-AI's ``HybridParallelPlugin`` (bf16, torch AdamW, eager attention so that sequence
parallelism stays causal, see Chapter 1), on fresh batches (:func:`helpers.models.llama.token_batch`);
on the CPU only the pure data-parallel layout runs, through ``TorchDDPPlugin`` in fp32 (Colossal-AI
0.5.0 runs nothing else there). The step time is the median over ``--steps`` timed steps after
``--warmup``, the slowest rank's.

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch03_layouts --tp 2
"""

import argparse
import math
import statistics
import time

import torch
import torch.distributed as dist

from helpers.run.env import distributed, emit, say, sync
from helpers.models.llama import build_llama, llama_config, llama_params, shard_batch, token_batch

GPU_MODEL = dict(layers=8, hidden=2048, heads=16, vocab=32000, seq=1024, batch=16)
CPU_MODEL = dict(layers=2, hidden=64, heads=4, vocab=256, seq=32, batch=4)


def make_plugin(args, is_gpu: bool):
    if not is_gpu:
        if (args.tp, args.pp, args.sp, args.zero) != (1, 1, 1, 0) or args.sp_mode:
            raise SystemExit(
                "on the CPU Colossal-AI 0.5.0 runs only pure data parallelism (TorchDDPPlugin, fp32); "
                "tensor/pipeline/sequence/ZeRO layouts need one CUDA GPU per rank"
            )
        from colossalai.booster.plugin import TorchDDPPlugin

        return TorchDDPPlugin()
    from colossalai.booster.plugin import HybridParallelPlugin

    return HybridParallelPlugin(
        tp_size=args.tp,
        pp_size=args.pp,
        sp_size=args.sp if args.sp_mode == "all_to_all" else None,
        enable_sequence_parallelism=args.sp_mode is not None,
        sequence_parallelism_mode=args.sp_mode,
        num_microbatches=args.microbatches if args.pp > 1 else None,
        precision="bf16",
        zero_stage=args.zero,
        max_norm=0.0,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key in ("tp", "pp", "sp"):
        p.add_argument(f"--{key}", type=int, default=1)
    p.add_argument("--sp_mode", choices=["split_gather", "all_to_all"], default=None)
    p.add_argument("--zero", type=int, default=0)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument(
        "--recompute", action="store_true", help="activation checkpointing (transformers')"
    )
    for key in GPU_MODEL:
        p.add_argument(f"--{key}", type=int, default=None)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()
    with distributed() as env:
        from colossalai.booster import Booster

        for key, value in (GPU_MODEL if env.is_gpu else CPU_MODEL).items():
            setattr(args, key, getattr(args, key) or value)
        plugin = make_plugin(args, env.is_gpu)
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
        times, losses = [], []
        for k in range(args.warmup + args.steps):
            batch = shard_batch(token_batch(k, args.batch, args.seq, args.vocab), dp_rank, dp_size)
            batch = {n: t.to(env.device) for n, t in batch.items()}
            dist.barrier()
            sync(env.device)
            t0 = time.perf_counter()
            if args.pp > 1:
                out = booster.execute_pipeline(
                    iter([batch]), model, lambda o, _: o.loss, opt, return_loss=True
                )
                loss = out["loss"]
            else:
                loss = model(**batch).loss
                booster.backward(loss, opt)
            opt.step()
            opt.zero_grad()
            sync(env.device)
            if k >= args.warmup:
                times.append(time.perf_counter() - t0)
            if loss is not None:
                losses.append(float(loss.detach()))
        slowest = torch.tensor(times, dtype=torch.float64, device=env.device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        peak = (
            torch.cuda.max_memory_allocated(env.device) / 2**30
            if env.device.type == "cuda"
            else 0.0
        )
        peak_t = torch.tensor([peak], device=env.device)
        dist.all_reduce(peak_t, op=dist.ReduceOp.MAX)
        step = statistics.median(slowest.tolist())
        if losses:
            assert all(math.isfinite(x) for x in losses), f"non-finite loss: {losses}"
        if env.rank == 0:
            say(
                f"tp={args.tp} pp={args.pp} sp={args.sp} {args.sp_mode or ''} zero={args.zero} "
                f"recompute={args.recompute}: step {step * 1e3:.1f} ms, peak {peak_t.item():.2f} GiB"
            )
        emit(
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
        del plugin  # its __del__ destroys the process groups: keep it alive until here


if __name__ == "__main__":
    main()
