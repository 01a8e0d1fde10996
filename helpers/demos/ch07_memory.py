"""Chapter 7: one training layout of a Llama under a Colossal-AI plugin, its GPU memory measured.

One launch = one :class:`helpers.config.layout.TrainLayout` (flags from ``layout.to_args()``),
e.g. ``--plugin zero --precision bf16 --zero_stage 2``. Every rank builds the same Llama, boosts it
with the layout's plugin and HybridAdam, trains on fresh token batches and reports:

* ``memory_allocated`` after building, after boosting and after the warm-up steps (Adam's m and v
  are created lazily in the first step, so model states are complete only then);
* one step measured phase by phase (the allocator's peak reset before forward, backward and the
  optimizer step; for a pipeline, forward+backward is one phase);
* ``max_memory_allocated`` over the timed steps with the peak reset after warm-up — the number
  the memory model of :mod:`helpers.cost.memory_llama` predicts — and tokens/s;
* the fixed overhead the allocator never sees: device memory in use minus memory reserved.

On a machine without one GPU per rank the same code runs the TorchDDPPlugin fp32 path on gloo
with a tiny shape; the measured fields are then None and only the prediction is reported.

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch07_memory --plugin zero --precision bf16 --zero_stage 1
"""

import argparse
import time

import torch
import torch.distributed as dist

from helpers.run.env import distributed, emit, say, sync
from helpers.cost.census import leftover_tensors, optimizer_census
from helpers.config.layout import CPU_SHAPE, TrainLayout, plugin_spec
from helpers.models.llama import build_llama, shard_batch, token_batch

MIB = 2**20


def memory_now(device) -> dict | None:
    """Allocated / reserved bytes of this rank (None on the CPU)."""
    if device.type != "cuda":
        return None
    return {
        "allocated": torch.cuda.memory_allocated(device),
        "reserved": torch.cuda.memory_reserved(device),
    }


def make_plugin(layout: TrainLayout):
    import colossalai.booster.plugin as plugins

    name, kwargs = plugin_spec(layout)
    return getattr(plugins, name)(**kwargs)


def make_optimizer(model, device):
    if device.type == "cuda":
        from colossalai.nn.optimizer import HybridAdam

        return HybridAdam(model.parameters(), lr=1e-4)
    return torch.optim.AdamW(
        model.parameters(), lr=1e-4
    )  # HybridAdam has no kernel for CPU-only builds


class Trainer:
    """One optimizer step, optionally measured phase by phase."""

    def __init__(self, layout, booster, model, opt, device, plugin):
        self.layout, self.booster, self.model, self.opt, self.device = (
            layout,
            booster,
            model,
            opt,
            device,
        )
        self.pipeline = layout.pp > 1
        mesh = getattr(plugin, "pg_mesh", None)
        if layout.plugin == "hybrid":
            self.dp_rank, self.dp_size = mesh.coordinate(plugin.dp_axis), mesh.size(plugin.dp_axis)
        else:
            self.dp_rank, self.dp_size = dist.get_rank(), dist.get_world_size()

    def batch(self, step: int) -> dict:
        layout = self.layout
        full = token_batch(step, layout.global_batch, layout.seq, layout.shape.vocab)
        return {
            k: v.to(self.device) for k, v in shard_batch(full, self.dp_rank, self.dp_size).items()
        }

    def _mark(self, phases, name):
        if phases is not None and self.device.type == "cuda":
            sync(self.device)
            phases[name] = {
                "peak": torch.cuda.max_memory_allocated(self.device),
                "allocated": torch.cuda.memory_allocated(self.device),
            }
            torch.cuda.reset_peak_memory_stats(self.device)

    def step(self, k: int, phases: dict | None = None) -> float | None:
        batch = self.batch(k)
        self._mark(phases, "start")
        if self.pipeline:
            out = self.booster.execute_pipeline(
                iter([batch]), self.model, lambda o, _: o.loss, self.opt, return_loss=True
            )
            loss = out["loss"]
            self._mark(phases, "forward_backward")
        else:
            loss = self.model(**batch).loss  # the output (and its logits) is dropped at once
            self._mark(phases, "forward")
            self.booster.backward(loss, self.opt)
            self._mark(phases, "backward")
        self.opt.step()
        self._mark(phases, "step")
        self.opt.zero_grad()
        self._mark(phases, "zero_grad")
        return None if loss is None else float(loss.detach().float())


def parser() -> argparse.ArgumentParser:
    """The command line (the recorder's tests parse its layouts with it)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    TrainLayout.add_arguments(p)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=4, help="timed steps")
    return p


def main() -> None:
    args = parser().parse_args()
    layout = TrainLayout.from_namespace(args)
    from colossalai.booster import Booster

    with distributed() as env:
        if not env.is_gpu:
            if layout.plugin != "ddp":
                raise SystemExit(
                    f"{layout.plugin} needs one CUDA GPU per rank in Colossal-AI 0.5.0; "
                    "on CPU only the TorchDDPPlugin fp32 layout runs"
                )
            layout = TrainLayout.from_dict(
                {
                    **layout.__dict__,
                    "shape": CPU_SHAPE,
                    "world": env.world_size,
                    "seq": min(layout.seq, 64),
                    "micro_batch": min(layout.micro_batch, 2),
                }
            )
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
        plugin = make_plugin(layout)
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
        measured = None
        if env.is_gpu:
            free, total = torch.cuda.mem_get_info(env.device)
            measured = {
                "peak": torch.cuda.max_memory_allocated(env.device),
                "peak_reserved": torch.cuda.max_memory_reserved(env.device),
                "device_used": total - free,
                "reserved": torch.cuda.memory_reserved(env.device),
            }
            measured["outside_allocator"] = measured["device_used"] - measured["reserved"]
        from helpers.cost.memory_llama import predict

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
                f"predicted {prediction['peak'] / MIB:.0f} MiB, {result['tokens_per_s']:.0f} tokens/s"
            )
        emit(**result)
        del model, opt, booster, trainer
        del plugin  # the plugin's __del__ destroys its process groups: keep it alive until here


if __name__ == "__main__":
    main()
