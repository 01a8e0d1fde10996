"""One training step's GPU memory, by category, from the CUDA caching allocator's own trace.

Used by :mod:`helpers.train.framework_run` (``--memory_snapshot``, Colossal-AI runs) and Chapter
8's figure beside Chapter 7's memory model (:func:`helpers.cost.memory_llama.predict`). During one
step ``torch.cuda.memory._record_memory_history`` logs every allocation and free; the step's phase
ends (forward, backward, optimizer step, zero_grad) are marked by the trace's length at each.
Every byte is then put in one category:

* **weights**, **optimizer** — blocks alive before the step that hold a model parameter or an fp32
  master copy, or an optimizer state (matched by address); the rest alive before is **other**
  (cuBLAS workspaces, buffers);
* **activations** — allocated in the forward, still alive when it ends (freed by the backward);
* **gradients** — allocated in the backward, still alive when it ends;
* **temporaries** — everything else allocated during the step (freed in the phase that made it).

:func:`trace_intervals` turns a profiled step's kernels into merged (start, end, class) intervals
for a timeline figure (:func:`helpers.figures.timeline.timeline`), with every kernel's
milliseconds by name (which matmuls ran in FP8 shows there).
"""

from __future__ import annotations

import bisect

import torch
from helpers.train.profiling import kernel_class

CATEGORIES = ("weights", "optimizer", "other", "activations", "gradients", "temporaries")


def _tensor_ptrs(trainer) -> tuple[list[int], list[int]]:
    """(addresses of weights and master copies, addresses of optimizer states)."""
    weights = [p.data_ptr() for p in trainer.model.parameters()]
    opt = getattr(trainer.opt, "optim", trainer.opt)  # Colossal-AI wraps the torch optimizer
    weights += [p.data_ptr() for g in opt.param_groups for p in g["params"]]
    states = [
        t.data_ptr()
        for s in opt.state.values()
        for t in s.values()
        if torch.is_tensor(t) and t.is_cuda
    ]
    return weights, states


class _Marks(dict):
    """Trainer.step's ``phases`` dict: remembers how long the allocator's trace was at each mark."""

    def __init__(self, device):
        super().__init__()
        self.device, self.at = device, {}

    def __setitem__(self, name, value):
        self.at[name] = len(torch.cuda.memory._snapshot()["device_traces"][self.device.index or 0])
        super().__setitem__(name, value)


def step_memory(trainer, k: int, device, points: int = 300) -> dict:
    """Run step ``k`` under the allocator's trace; bytes per category over the step (GiB, at
    ``points`` instants), the phase ends and the peak of the step."""
    torch.cuda.synchronize(device)
    live_start = torch.cuda.memory_allocated(device)
    snap0 = torch.cuda.memory._snapshot()
    blocks = []  # (address, size) of every allocated block before the step
    for seg in snap0["segments"]:
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                blocks.append((addr, b["size"]))
            addr += b["size"]
    blocks.sort()
    starts = [a for a, _ in blocks]
    weights, states = _tensor_ptrs(trainer)

    def owners(ptrs):
        found = {}
        for p in ptrs:
            i = bisect.bisect_right(starts, p) - 1
            if i >= 0 and p < blocks[i][0] + blocks[i][1]:
                found[blocks[i][0]] = blocks[i][1]
        return found

    w, o = owners(weights), owners(states)
    o = {a: s for a, s in o.items() if a not in w}
    static = {"weights": sum(w.values()), "optimizer": sum(o.values())}
    static["other"] = live_start - static["weights"] - static["optimizer"]
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, context=None, stacks="python")
    marks = _Marks(device)
    try:
        trainer.step(k, marks)
        torch.cuda.synchronize(device)
        trace = torch.cuda.memory._snapshot()["device_traces"][device.index or 0]
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    return categorize(trace, marks.at, static, points)


def categorize(trace: list[dict], at: dict, static: dict, points: int = 300) -> dict:
    """Bytes per category over a step from allocator trace entries (``action``, ``addr``,
    ``size``) and the trace index of each phase end (``at``: forward, backward, step, ...)."""
    start = at.get("start", 0)
    fwd_end, bwd_end = at["forward"], at["backward"]
    born, life = {}, []  # addr -> (index, size); finished (born, died, size)
    for i, e in enumerate(trace[start:], start):
        if e["action"] == "alloc":
            born[e["addr"]] = (i, e["size"])
        elif e["action"] == "free_requested" and e["addr"] in born:
            b, s = born.pop(e["addr"])
            life.append((b, i, s))
    end = len(trace)
    life += [(b, end, s) for b, s in born.values()]

    def kind(b, d):
        if b < fwd_end and d >= fwd_end:
            return "activations"
        if fwd_end <= b < bwd_end and d >= bwd_end:
            return "gradients"
        return "temporaries"

    step = max(1, (end - start) // points)
    marks = list(range(start, end, step)) + [end - 1]
    series = {c: [static.get(c, 0) / 2**30] * len(marks) for c in CATEGORIES}
    for b, d, s in life:
        c = kind(b, d)
        lo, hi = bisect.bisect_left(marks, b), bisect.bisect_left(marks, d)
        for j in range(lo, hi):
            series[c][j] += s / 2**30
    totals = [sum(series[c][j] for c in CATEGORIES) for j in range(len(marks))]
    return {
        "events": [m - start for m in marks],
        "gib": {c: [round(v, 3) for v in vals] for c, vals in series.items()},
        "phases": {name: i - start for name, i in at.items()},
        "peak_gib": round(max(totals), 3),
        "static_gib": {c: round(v / 2**30, 3) for c, v in static.items()},
    }


def trace_intervals(events: list[tuple[str, float, float]], gap_us: float = 2.0) -> dict:
    """One step's kernels (name, start_us, end_us) as merged [start_ms, end_ms, class] intervals
    (kernels of one class closer than ``gap_us`` merge) and the share of the step the GPU was
    busy."""
    events = sorted(events, key=lambda e: e[1])
    if not events:
        return {"intervals": [], "busy": 0.0, "span_ms": 0.0}
    t0, out = events[0][1], []
    for name, a, b in events:
        c = kernel_class(name)
        if out and out[-1][2] == c and a - out[-1][1] <= gap_us:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b, c])
    per_name: dict[str, float] = {}
    for name, a, b in events:
        per_name[name[:90]] = per_name.get(name[:90], 0.0) + (b - a) / 1000
    busy, cursor = 0.0, t0
    for a, b, _ in out:
        a = max(a, cursor)
        if b > a:
            busy, cursor = busy + b - a, b
    span = max(b for _, b, _ in out) - t0
    return {
        "intervals": [[round((a - t0) / 1000, 4), round((b - t0) / 1000, 4), c] for a, b, c in out],
        "busy": round(busy / span, 4) if span > 0 else 0.0,
        "span_ms": round(span / 1000, 3),
        "kernels": {n: round(ms, 3) for n, ms in sorted(per_name.items(), key=lambda kv: -kv[1])},
    }
