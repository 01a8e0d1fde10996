"""One optimizer step of a Chapter 7 training layout under its plugin, measurable phase by phase.

Used by Chapter 7's memory demo (``helpers/demos/ch07_memory.py``, whose flags the recorder
parses with :func:`parser`) and Chapter 8's framework comparison
(:mod:`helpers.train.framework_run`). A :class:`helpers.config.layout.TrainLayout` names the
plugin and its settings (:func:`layout_plugin`); :class:`Trainer` trains on fresh token batches,
each data-parallel rank on its rows, and can record the allocator's peak after each phase.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from helpers.config.layout import CPU_SHAPE, TrainLayout, plugin_spec
from helpers.models.llama import shard_batch, token_batch
from helpers.run import cli
from helpers.run.env import sync

CPU_ONLY = "on the CPU only the TorchDDPPlugin fp32 layout runs"


def parser(doc: str | None = None):
    """The command line (the recorder's tests parse its layouts with it)."""
    p = cli.parser(doc)
    TrainLayout.add_arguments(p)
    cli.add(p, "warmup", 2)
    cli.add(p, "steps", 4, help="timed steps")
    return p


def on_cpu(layout: TrainLayout, **changes) -> TrainLayout:
    """The gloo path of a layout: a tiny shape, at most 64 tokens and 2 sequences per
    micro-batch, and ``changes``."""
    return TrainLayout.from_dict(
        {
            **layout.__dict__,
            "shape": CPU_SHAPE,
            **changes,
            "seq": min(layout.seq, 64),
            "micro_batch": min(layout.micro_batch, 2),
        }
    )


def memory_now(device) -> dict | None:
    """Allocated / reserved bytes of this rank (None on the CPU)."""
    if device.type != "cuda":
        return None
    return {
        "allocated": torch.cuda.memory_allocated(device),
        "reserved": torch.cuda.memory_reserved(device),
    }


def device_memory(device) -> dict:
    """Peak and reserved bytes since the last reset, and what the allocator never sees: device
    memory in use minus memory reserved (CUDA context, NCCL buffers)."""
    free, total = torch.cuda.mem_get_info(device)
    measured = {
        "peak": torch.cuda.max_memory_allocated(device),
        "peak_reserved": torch.cuda.max_memory_reserved(device),
        "device_used": total - free,
        "reserved": torch.cuda.memory_reserved(device),
    }
    measured["outside_allocator"] = measured["device_used"] - measured["reserved"]
    return measured


def layout_plugin(layout: TrainLayout, **extra):
    """The layout's Colossal-AI plugin (:func:`helpers.config.layout.plugin_spec`), with
    ``extra`` constructor keywords on top."""
    import colossalai.booster.plugin as plugins

    name, kwargs = plugin_spec(layout)
    return getattr(plugins, name)(**{**kwargs, **extra})


def make_optimizer(model, device):
    """HybridAdam on GPUs; AdamW on the CPU (HybridAdam has no kernel for CPU-only builds)."""
    if device.type == "cuda":
        from colossalai.nn.optimizer import HybridAdam

        return HybridAdam(model.parameters(), lr=1e-4)
    return torch.optim.AdamW(model.parameters(), lr=1e-4)


class Trainer:
    """One optimizer step, optionally measured phase by phase."""

    def __init__(self, layout, booster, model, opt, device, plugin):
        self.layout, self.booster, self.model, self.opt = layout, booster, model, opt
        self.device = device
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
