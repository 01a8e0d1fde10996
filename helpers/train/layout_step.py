"""One optimizer step of a Chapter 7 training layout under its plugin, measurable phase by phase.

Used by Chapter 7's memory demo (``helpers/demos/ch07_memory.py``, whose flags the recorder
parses with :func:`parser`) and Chapter 8's framework comparison
(:mod:`helpers.train.framework_run`). A :class:`helpers.parallel.train_layout.TrainLayout` names the
plugin and its settings (:func:`layout_plugin`); :class:`Trainer` trains on fresh token batches,
each data-parallel rank on its rows, and can record the allocator's peak after each phase.
Without a pipeline, ``layout.microbatches`` = m > 1 is gradient accumulation: m micro-batches of
``micro_batch`` sequences, then one optimizer step (:func:`accumulation_sync` says how each plugin
accumulates).
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from helpers.parallel.train_layout import CPU_SHAPE, TrainLayout, plugin_spec
from helpers.models.llama import shard_batch, token_batch
from helpers.run import cli
from helpers.run.env import sync

CPU_ONLY = "on the CPU only the TorchDDPPlugin fp32 layout runs"


def parser(doc: str | None = None):
    """The command line (the recorder's tests parse its layouts with it)."""
    p = cli.parser(doc)
    cli.add_layout(p, TrainLayout)
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
    """The layout's Colossal-AI plugin (:func:`helpers.parallel.train_layout.plugin_spec`), with
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


def accumulation_sync(layout: TrainLayout) -> bool:
    """Whether gradient accumulation without a pipeline runs the micro-batches before the last under
    ``booster.no_sync`` (True), or lets each micro-batch's backward reduce (False); a ValueError
    where the layout's plugin cannot accumulate as built here.

    What Colossal-AI 0.5.0 does (``colossalai/booster``): ``Booster.no_sync`` asserts
    ``plugin.support_no_sync()`` (booster.py:223-238). TorchDDPPlugin: True, torch DDP's own
    ``no_sync`` (torch_ddp_plugin.py:256, 307-309): gradients add up in ``p.grad`` and the last
    backward all-reduces the sum. HybridParallelPlugin: True (hybrid_parallel_plugin.py:1276), but
    ``no_sync`` asserts ``zero_stage != 2`` (1500-1504); at ZeRO 0 it is
    ``HybridParallelModule.no_sync`` (139-159: ``require_grad_sync = False`` and torch DDP's
    ``no_sync`` whenever it wraps DDP, which it does at pp = 1 even over one rank, 1311-1313), and
    ``MixedPrecisionOptimizer.step`` casts the summed bf16 ``p.grad`` to fp32 then
    (amp/naive_amp/mixed_precision_optimizer.py:174-181); at ZeRO 1 the optimizer's ``no_sync``.
    LowLevelZeroPlugin: only at stage 1 (low_level_zero_plugin.py:472-473, 630-632):
    ``LowLevelZeroOptimizer.no_sync`` clears ``require_grad_sync``, so the post-accumulate hooks
    bucket nothing and ``backward`` returns before reducing (zero/low_level/low_level_optim.py:
    310-313, 463-464, 746-752); the bf16 ``p.grad`` sums, and the last backward buckets the sum
    (bookkeeping/bucket_store.py:80-90). At stage 2 ``backward`` asserts against ``no_sync``
    (low_level_optim.py:452-454): every micro-batch reduce-scatters, and ``_add_grad`` adds the
    result to the own shard already stored (low_level_optim.py:415-429,
    bookkeeping/gradient_store.py:61-72). GeminiPlugin has no ``no_sync`` (gemini_plugin.py:573,
    706) and, without ``enable_gradient_accumulation`` (not set here), writes each gradient into
    the bf16 chunk in place of the weights (zero/gemini/gemini_ddp.py:106, 379-400), so a second
    micro-batch would run on gradients: refused."""
    if layout.plugin == "gemini":
        raise ValueError(
            "GeminiPlugin accumulates only with enable_gradient_accumulation=True, which these "
            "layouts do not set: use microbatches=1"
        )
    return not (layout.plugin in ("zero", "hybrid") and layout.zero_stage == 2)


class Trainer:
    """One optimizer step, optionally measured phase by phase.

    Phase marks (:meth:`_mark`, the allocator's peak since the previous mark): ``start``, then
    ``forward_backward`` with a pipeline, else ``forward`` and ``backward``, then ``step`` and
    ``zero_grad``. With accumulation (pp = 1, m > 1) micro-batch i < m marks ``forward i`` and
    ``backward i``, and the last one ``forward`` and ``backward``: those are the ones that run on
    top of the gradients held from the earlier micro-batches, which the memory model's phases
    predict (:func:`helpers.cost.memory_llama.predict`)."""

    def __init__(self, layout, booster, model, opt, device, plugin):
        self.layout, self.booster, self.model, self.opt = layout, booster, model, opt
        self.device = device
        self.pipeline = layout.pp > 1
        self.accumulate = not self.pipeline and layout.microbatches > 1
        self.quiet = accumulation_sync(layout) if self.accumulate else False
        if self.quiet and not plugin.support_no_sync():
            raise ValueError(f"{type(plugin).__name__} has no no_sync to accumulate under")
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

    def _accumulate(self, batch: dict, phases: dict | None) -> torch.Tensor:
        """Forward and backward of the m micro-batches of one step, each loss scaled by 1/m, so
        that the summed gradients are those of the whole batch (HF's loss is the mean over the
        tokens, and every micro-batch has as many); the mean loss. Rows ``i·b … (i+1)·b - 1`` of
        this data rank's batch are micro-batch i. All but the last run under the plugin's
        ``no_sync`` where it has one (:func:`accumulation_sync`)."""
        m, b = self.layout.microbatches, self.layout.micro_batch
        rows = next(iter(batch.values())).shape[0]
        if rows != m * b:
            raise ValueError(f"{rows} sequences per data rank, not {m} micro-batches of {b}")
        total = None
        for i in range(m):
            last = i == m - 1
            tag = "" if last else f" {i + 1}"
            quiet = self.quiet and not last
            with self.booster.no_sync(self.model, self.opt) if quiet else contextlib.nullcontext():
                loss = self.model(**{k: v[i * b : (i + 1) * b] for k, v in batch.items()}).loss
                self._mark(phases, "forward" + tag)
                self.booster.backward(loss / m, self.opt)
            self._mark(phases, "backward" + tag)
            total = loss.detach() if total is None else total + loss.detach()
        return total / m

    def step(self, k: int, phases: dict | None = None) -> float | None:
        batch = self.batch(k)
        self._mark(phases, "start")
        if self.accumulate:
            loss = self._accumulate(batch, phases)
        elif self.pipeline:
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
