"""Chapter 7: one training layout of a Llama under a Colossal-AI plugin, its GPU memory measured.

One launch = one :class:`helpers.parallel.train_layout.TrainLayout` (flags from
``layout.to_args()``), e.g. ``--plugin zero --precision bf16 --zero_stage 2``. Every rank builds the
same Llama, boosts it with the layout's plugin and HybridAdam, trains on fresh token batches
(:class:`helpers.train.layout_step.Trainer`) and reports:

* ``memory_allocated`` after building, after boosting and after the warm-up steps (Adam's m and v
  are created lazily in the first step, so model states are complete only then);
* one step measured phase by phase (the allocator's peak reset before forward, backward and the
  optimizer step; for a pipeline, forward+backward is one phase);
* ``max_memory_allocated`` over the timed steps with the peak reset after warm-up — the number
  the memory model of :mod:`helpers.cost.memory_llama` predicts — and tokens/s;
* the fixed overhead the allocator never sees: device memory in use minus memory reserved.

On a machine without one GPU per rank the same code runs the TorchDDPPlugin fp32 path on gloo
with a tiny shape; the measured fields are then None and only the prediction is reported.

    torchrun --nproc_per_node 2 -m helpers.demos.ch07_memory --plugin zero --zero_stage 1
    ... --precision bf16 --recompute    (any TrainLayout flag)
"""

import time

import torch

from helpers.parallel.train_layout import TrainLayout
from helpers.cost.census import leftover_tensors, optimizer_census
from helpers.models.llama import build_llama
from helpers.run import cli
from helpers.run.env import distributed, emit, say, sync
from helpers.run.result_types.ch07 import MemoryResult
from helpers.train.layout_step import (
    CPU_ONLY,
    Trainer,
    device_memory,
    layout_plugin,
    make_optimizer,
    memory_now,
    on_cpu,
    parser,
)
from helpers.cost.memory_llama import predict

MIB = 2**20


def main() -> None:
    args = parser(__doc__).parse_args()
    layout = TrainLayout.from_namespace(args)
    from colossalai.booster import Booster

    with distributed() as env, cli.plugin_lifetime() as keep:
        if not env.is_gpu:
            if layout.plugin != "ddp":
                cli.require_gpu(env, layout.plugin, CPU_ONLY)
            layout = on_cpu(layout, world=env.world_size)
        torch.backends.cuda.matmul.allow_tf32 = True
        memory = {}
        config = layout.shape.config(attn=layout.attn, max_seq=layout.seq)
        with torch.device(env.device):
            model = build_llama(config)  # fp32; the plugin casts to bf16 itself
        if layout.recompute:
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        memory["built"] = memory_now(env.device)
        plugin = keep(layout_plugin(layout))
        booster = Booster(plugin=plugin)
        opt = make_optimizer(model, env.device)
        model, opt, _, _, _ = booster.boost(model, opt)
        memory["boosted"] = memory_now(env.device)
        trainer = Trainer(layout, booster, model, opt, env.device, plugin)
        losses = [trainer.step(k) for k in range(args.warmup)]
        memory["after_warmup"] = memory_now(env.device)
        census = optimizer_census(opt, model)
        if env.is_gpu:
            census["leftovers"] = leftover_tensors(opt, model)
        phases = {} if env.is_gpu else None
        if env.is_gpu:
            torch.cuda.reset_peak_memory_stats(env.device)
        losses.append(trainer.step(args.warmup, phases))
        sync(env.device)
        if env.is_gpu:
            torch.cuda.reset_peak_memory_stats(env.device)
        start = time.perf_counter()
        for k in range(args.warmup + 1, args.warmup + 1 + args.steps):
            losses.append(trainer.step(k))
        sync(env.device)
        seconds = (time.perf_counter() - start) / args.steps
        measured = device_memory(env.device) if env.is_gpu else None

        prediction = predict(layout, rank=env.rank)
        known = [x for x in losses if x is not None]
        result = dict(
            layout=layout.__dict__ | {"shape": layout.shape.__dict__},
            backend=env.backend,
            memory=memory,
            phases=phases,
            measured=measured,
            census=census,
            prediction=prediction,
            loss_first=known[0] if known else None,
            loss_last=known[-1] if known else None,
            step_seconds=seconds,
            tokens_per_s=layout.global_batch * layout.seq / seconds,
            params=sum(p.numel() for p in model.parameters()),
        )
        if measured:
            say(
                f"[rank{env.rank}] {layout.name}: peak {measured['peak'] / MIB:.0f} MiB, "
                f"predicted {prediction['peak'] / MIB:.0f} MiB, "
                f"{result['tokens_per_s']:.0f} tokens/s"
            )
        emit(MemoryResult, **result)
        del model, opt, booster, trainer


if __name__ == "__main__":
    main()
