"""One training step's profiler trace as per-rank intervals: compute, communication, idle.

Chapter 2, "One step as a trace" (CPU ranks on gloo), and the flagship step on one GPU
(Chapter 8). A ``torch.profiler`` run that wraps the step in ``record_function(marker)`` becomes
a :class:`StepTrace`: the step's window and the spans of compute and of communication in it, in
absolute microseconds (the profiler's start time plus each event's offset), so the traces of
several ranks on one machine share a clock.

Which events are which is :mod:`helpers.train.profiling`'s rule (:func:`~helpers.train.profiling.
is_comm`), applied to

* **CPU traces** (gloo): the ``aten::`` operators of the thread that ran the marker are compute
  (as in :func:`~helpers.train.profiling.device_events`; wrappers such as an autograd function's
  range also hold the time spent waiting inside it, so they are not counted), unless they run
  inside a collective; communication is every collective event on any thread. gloo runs a collective
  on a thread of its own (``gloo:all_reduce``, from the moment it is queued until every peer has
  taken part), so a collective started with ``async_op=True`` shows up beside the compute that
  continues on the main thread;
* **CUDA traces** (NCCL): the device's kernels; NCCL kernels are communication, every other kernel
  is compute (:func:`~helpers.train.profiling.device_events` picks them).

Where both run at once the time counts as *overlapped*; communication with no compute beside it
is *exposed*; time in the window with neither is *idle* (waiting for a peer, the host, or the
operating system's scheduler). :meth:`StepTrace.intervals` gives the disjoint
``(start_s, end_s, kind)`` rows that :func:`helpers.figures.timeline.timeline` draws.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import asdict, dataclass, field

from helpers.train.profiling import device_events, is_comm, merged_length

Span = tuple[float, float]


def union(spans: list[Span]) -> list[Span]:
    """The spans merged: sorted, disjoint, touching or overlapping ones joined."""
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def intersect(x: list[Span], y: list[Span]) -> list[Span]:
    """The time covered by both ``x`` and ``y``."""
    x, y, out, i, j = union(x), union(y), [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(x: list[Span], y: list[Span]) -> list[Span]:
    """The time covered by ``x`` but not by ``y``."""
    out, y = [], union(y)
    for a, b in union(x):
        for c, d in y:
            if d <= a or c >= b:
                continue
            if c > a:
                out.append((a, c))
            a = max(a, d)
        if a < b:
            out.append((a, b))
    return out


def clip(spans: list[Span], window: Span) -> list[Span]:
    """The parts of ``spans`` inside ``window``."""
    return intersect(spans, [window])


@dataclass
class StepTrace:
    """One rank's step: its window and the spans of compute and of communication (µs)."""

    window: Span
    compute: list[Span]
    communication: list[Span]
    collectives: int = 0  # communication calls in the window (CPU) or NCCL kernels (CUDA)
    device: str = "cpu"
    names: dict[str, int] = field(default_factory=dict)  # communication event name -> count

    def __post_init__(self) -> None:
        self.window = tuple(self.window)
        self.compute = clip(self.compute, self.window)
        self.communication = clip(self.communication, self.window)

    def numbers(self) -> dict[str, float]:
        """Milliseconds of the step, compute, communication, overlapped, exposed communication and
        idle, and the share of communication hidden under compute."""
        comm, overlapped = merged_length(self.communication), merged_length(self.overlapped())
        step = self.window[1] - self.window[0]
        busy = merged_length(self.compute + self.communication)
        return {
            "step_ms": step / 1e3,
            "compute_ms": merged_length(self.compute) / 1e3,
            "communication_ms": comm / 1e3,
            "overlapped_ms": overlapped / 1e3,
            "exposed_ms": (comm - overlapped) / 1e3,
            "idle_ms": (step - busy) / 1e3,
            "hidden_share": overlapped / comm if comm else 0.0,
        }

    def overlapped(self) -> list[Span]:
        return intersect(self.compute, self.communication)

    def intervals(self) -> list[tuple[float, float, str]]:
        """Disjoint (start_s, end_s, kind) covering the window: "compute" wherever compute runs
        (overlapped communication included), "communication" where only communication runs
        (exposed), "idle" elsewhere."""
        exposed = subtract(self.communication, self.compute)
        idle = subtract([self.window], self.compute + self.communication)
        kinds = [(s, "compute") for s in union(self.compute)]
        kinds += [(s, "communication") for s in exposed] + [(s, "idle") for s in idle]
        return [(a / 1e6, b / 1e6, kind) for (a, b), kind in sorted(kinds)]

    def comm_intervals(self) -> list[tuple[float, float, str]]:
        """Every communication span (overlapped or not), for a row of its own under the rank's."""
        return [(a / 1e6, b / 1e6, "communication") for a, b in union(self.communication)]

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "StepTrace":
        return cls(
            tuple(d["window"]),
            [tuple(s) for s in d["compute"]],
            [tuple(s) for s in d["communication"]],
            d.get("collectives", 0),
            d.get("device", "cpu"),
            d.get("names", {}),
        )


# (name, start_us, end_us, thread, is_device_kernel) in absolute microseconds
Event = tuple[str, float, float, int, bool]


def traces_of(results: list[dict], order: str) -> dict[int, StepTrace]:
    """Each rank's recorded step (a demo result's ``trace``) for one ``order``, by rank."""
    return {r["rank"]: StepTrace.from_json(r["trace"]) for r in results if r["order"] == order}


def from_events(events: list[Event], device: str = "cpu", marker: str = "step") -> StepTrace:
    """Classify a trace's events (see the module docstring); the window is the ``marker`` range
    (on CUDA its range on the GPU, or the first to the last kernel when there is none)."""
    marks = [e for e in events if e[0] == marker and not e[4]]
    if device == "cuda":
        # the marker's range on the GPU (Kineto records a record_function there too) is the
        # window, not a kernel
        gpu_marks = [e for e in events if e[4] and e[0] == marker]
        kernels = [e for e in events if e[4] and e[0] != marker]
        if not kernels:
            raise ValueError("no CUDA kernel in the trace (profile with ProfilerActivity.CUDA)")
        window = (
            (gpu_marks[0][1], gpu_marks[0][2])
            if gpu_marks
            else (min(e[1] for e in kernels), max(e[2] for e in kernels))
        )
        comm = [e for e in kernels if is_comm(e[0])]
        compute = [(e[1], e[2]) for e in kernels if not is_comm(e[0])]
        calls = comm
    else:
        if not marks:
            raise ValueError(f"no record_function({marker!r}) range in the trace")
        window, main = (marks[0][1], marks[0][2]), marks[0][3]
        inside = [e for e in events if not e[4] and e[1] < window[1] and e[2] > window[0]]
        comm = [e for e in inside if is_comm(e[0])]
        compute = [(e[1], e[2]) for e in inside if e[3] == main and e[0].startswith("aten::")]
        # operators nested in a collective on the main thread are part of it, not compute
        compute = subtract(compute, [(e[1], e[2]) for e in comm if e[3] == main])
        # one call per collective: the operator the main thread entered (c10d::allreduce_, ...)
        calls = [e for e in comm if e[3] == main and e[0].startswith("c10d::")]
    names: dict[str, int] = {}
    for e in calls:
        names[e[0]] = names.get(e[0], 0) + 1
    return StepTrace(window, compute, [(e[1], e[2]) for e in comm], len(calls), device, names)


@contextlib.contextmanager
def _stderr_muted():
    """Silence the process's C-level stderr (file descriptor 2) inside the block."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


@contextlib.contextmanager
def profiled(activities, marker: str = "step", first=None):
    """A ``torch.profiler.profile`` around the block, the block wrapped in
    ``record_function(marker)``; yields the profile (read it after the block). ``first`` (e.g.
    ``dist.barrier``) runs once the profiler has started, before the marker, so that ranks start
    the step together. Only the profiler's own start and stop lines on stderr (Kineto's
    "profiler_start" notes) are muted; the step itself is not."""
    from torch.profiler import profile, record_function

    prof = profile(activities=activities)
    with _stderr_muted():
        prof.start()
    try:
        if first is not None:
            first()
        with record_function(marker):
            yield prof
    finally:
        with _stderr_muted():
            prof.stop()


def profile_events(prof) -> list[Event]:
    """A ``torch.profiler.profile``'s events in absolute µs (its start time plus each offset)."""
    from torch.autograd import DeviceType

    base = prof.profiler.kineto_results.trace_start_ns() / 1e3
    return [
        (
            e.name,
            base + e.time_range.start,
            base + e.time_range.end,
            e.thread,
            e.device_type == DeviceType.CUDA,
        )
        for e in prof.events()
    ]


def from_profile(prof, device: str = "cpu", marker: str = "step") -> StepTrace:
    """:func:`from_events` of a finished ``torch.profiler.profile``; on CUDA its kernels are the
    ones :func:`helpers.train.profiling.device_events` picks (without the ranges that
    ``record_function`` leaves on the GPU), and the marker's range on the GPU is the window."""
    if device != "cuda":
        return from_events(profile_events(prof), device, marker)
    from torch.autograd import DeviceType

    base = prof.profiler.kineto_results.trace_start_ns() / 1e3
    kernels = [(n, base + a, base + b, 0, True) for n, a, b in device_events(prof, "cuda", False)]
    marks = [
        (e.name, base + e.time_range.start, base + e.time_range.end, 0, True)
        for e in prof.events()
        if e.device_type == DeviceType.CUDA and e.name == marker
    ]
    return from_events(kernels + marks, device, marker)


def chrome_events(trace: dict) -> list[Event]:
    """The complete ("X") events of a Chrome trace written by ``prof.export_chrome_trace``, in
    absolute µs (``baseTimeNanoseconds`` plus each ``ts``); kernels are the ``kernel`` events."""
    base = trace.get("baseTimeNanoseconds", 0) / 1e3
    out = []
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and "dur" in e:
            start = base + float(e["ts"])
            kernel = e.get("cat") == "kernel"
            out.append((e["name"], start, start + float(e["dur"]), e.get("tid", 0), kernel))
    return out
