"""The memory of one training step, op by op, on the CPU (Chapter 7, "The loss is often the peak").

:func:`step_trace` runs one forward, backward and optimizer step of a model under PyTorch's
``MemTracker`` (``torch.distributed._tools.mem_tracker``), which follows every tensor's storage and
files it under a kind: parameters, gradients, optimizer states, activations (what the forward
makes) and temporaries (what the backward makes besides gradients). After every operator the
trace takes the bytes of each kind, so the phases of a step can be read off it: the forward
builds activations, the backward frees them while it builds gradients, the optimizer step adds its
temporaries, and ``zero_grad`` frees the gradients. :func:`trace_facts` reads the numbers the
chapter states from a trace; :func:`helpers.figures.memory_phases.phases_figure` draws it.
"""

from __future__ import annotations

import torch

KINDS = ("Parameter", "Optstate", "Gradient", "Activation", "Temp")
PHASES = ("forward", "backward", "optimizer step", "zero_grad")


def _tracker_class():
    from torch.distributed._tools.mem_tracker import MemTracker

    class TracingMemTracker(MemTracker):
        """MemTracker that keeps the bytes of every kind after each operator (its peak update)."""

        def __init__(self) -> None:
            super().__init__()
            self.points: list[dict[str, int]] = []

        def snapshot(self) -> dict[str, int]:
            snap = {kind: 0 for kind in KINDS}
            for dev in self._curr_mem_snap.values():
                for kind, value in dev.items():
                    name = getattr(kind, "value", str(kind))
                    if name in snap:
                        snap[name] += value
            return snap

        def _update_peak_stats(self, peak_state) -> None:
            super()._update_peak_stats(peak_state)
            self.points.append(self.snapshot())

    return TracingMemTracker


def step_trace(model, batch: dict, optimizer) -> dict:
    """Bytes of each kind (:data:`KINDS`) after every operator of one training step of ``model``
    on ``batch`` (a Hugging Face model that returns ``.loss``), and where each phase
    (:data:`PHASES`) ends. The optimizer takes one step first, untraced, so that its states exist,
    as in every step but the first. Returns ``{"points": [...], "ends": {phase: index}}``."""
    model(**batch).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    tracker = _tracker_class()()
    tracker.track_external(model, optimizer)
    ends = {}
    with tracker:
        tracker.points.append(tracker.snapshot())
        loss = model(**batch).loss
        ends["forward"] = len(tracker.points)
        loss.backward()
        del loss
        tracker.points.append(tracker.snapshot())
        ends["backward"] = len(tracker.points)
        optimizer.step()
        tracker.points.append(tracker.snapshot())
        ends["optimizer step"] = len(tracker.points)
        optimizer.zero_grad(set_to_none=True)
        tracker.points.append(tracker.snapshot())
        ends["zero_grad"] = len(tracker.points)
    return {"points": tracker.points, "ends": ends}


def trace_facts(trace: dict) -> dict:
    """What the trace says about the step, in bytes: ``start`` (before the forward), ``peak`` and
    the ``peak_phase`` it falls in, each kind's bytes at the peak (``at_peak``), the activations
    at the end of the forward (``activations_after_forward``) and at the end of the backward,
    the gradients at the end of the backward, and the total after ``zero_grad``."""
    points, ends = trace["points"], trace["ends"]
    totals = [sum(p.values()) for p in points]
    at = max(range(len(points)), key=totals.__getitem__)
    phase = next(name for name in PHASES if at < ends[name])
    last = {name: points[ends[name] - 1] for name in PHASES}
    return {
        "start": totals[0],
        "peak": totals[at],
        "peak_index": at,
        "peak_phase": phase,
        "at_peak": dict(points[at]),
        "activations_after_forward": last["forward"]["Activation"],
        "activations_after_backward": last["backward"]["Activation"],
        "gradients_after_backward": last["backward"]["Gradient"],
        "end": totals[-1],
    }


def bf16_llama_step(shape, b: int, s: int, seed: int = 0) -> tuple:
    """(model, batch, optimizer): a bf16 Llama of ``shape`` with ``torch.optim.AdamW``, and b
    sequences of s random tokens that are their own labels: the step :func:`step_trace` traces."""
    from helpers.models.llama import build_llama  # transformers, loaded only to build the model

    torch.manual_seed(seed)
    model = build_llama(shape.config(), dtype=torch.bfloat16)
    ids = torch.randint(0, shape.vocab, (b, s), generator=torch.Generator().manual_seed(seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    return model, {"input_ids": ids, "labels": ids}, optimizer
