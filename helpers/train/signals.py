"""The three signals to watch while training (Chapter 5): throughput, memory, communication wait.

Used by ``helpers.demos.ch05_train``; every number is measured inside the rank, none is modelled.

* **Throughput**: samples and tokens of the *global* batch per second of wall time over a log
  interval (the GPU is synchronised before each clock reading).
* **Memory**: on a GPU, ``torch.cuda.max_memory_allocated`` since the last report (the peak the
  caching allocator handed to tensors); on the CPU, the process's resident set size (psutil) and
  its peak since the process started (``getrusage``), which include the Python interpreter and
  every imported library, not just tensors.
* **Communication wait**: a DDP communication hook (:class:`CommTimer`) records when each gradient
  bucket is handed to the all-reduce and when that all-reduce completes. DDP overlaps these
  collectives with the rest of the backward pass, so their total duration ("busy") overstates the
  cost; the rank only *waits* after the last bucket is launched (all gradients computed, nothing
  left to overlap) until the last all-reduce completes. That stretch per step, plus every blocking
  collective the loop runs itself (:meth:`CommTimer.blocking`, e.g. the all-reduce of the logged
  loss), divided by the interval's wall time, is the wait share.

Limits: only communication the hook or :meth:`CommTimer.blocking` sees is counted; a wait caused
by a slow partner (a straggler) counts as communication although it is really the partner's
compute; on two shared CPU cores gloo's threads compete with compute, so "busy" also absorbs CPU
contention. On GPUs, NCCL completes a future when the collective is queued on its stream, not when
it has finished, so host clocks in the hook measure nothing useful there. On a GPU the meter reads
the GPU's own clock instead (:class:`KernelTimer`, ``torch.profiler`` through CUPTI): "busy" is the
time an NCCL kernel runs, "wait" the part of it during which no other kernel runs (communication
nothing hides). On the CPU without a DDP module to hook (e.g. no data parallelism) the line says
"n/a".
"""

from __future__ import annotations

import contextlib
import resource
import threading
import time
from dataclasses import dataclass

import psutil
import torch

from helpers.run.env import sync
from helpers.train.profiling import merged_length

MiB = 2**20


def memory_now(device: torch.device) -> dict[str, float]:
    """Memory of this rank in MiB: GPU peak allocated since the last call, or CPU RSS and its
    peak."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / MiB
        torch.cuda.reset_peak_memory_stats(device)
        return {"gpu_peak_mib": round(peak, 1)}
    rss = psutil.Process().memory_info().rss / MiB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    return {"rss_mib": round(rss, 1), "rss_peak_mib": round(max(peak, rss), 1)}


class CommTimer:
    """Times DDP's gradient all-reduces (a comm hook) and the loop's own blocking collectives."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: list[tuple[float, float]] = []  # (launched, completed) for this step
        self.busy_s = 0.0  # collectives in flight, summed (overlapped time included)
        self.wait_s = 0.0  # time the rank could do nothing but wait for a collective
        self.enabled = False

    def attach(self, model) -> bool:
        """Register the timing hook on the DDP module inside a boosted model.

        False (nothing measured) when there is no DDP module or when its collectives do not run
        on gloo: NCCL's futures complete before the GPU has done the work (see the module notes).
        """
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        ddp = getattr(model, "module", model)
        if not isinstance(ddp, DDP) or dist.get_backend(ddp.process_group) != "gloo":
            return False
        ddp.register_comm_hook(None, self._hook)
        self.enabled = True
        return True

    def _hook(self, state, bucket):
        # same arithmetic as DDP's default hook (divide by the world size, then all-reduce SUM)
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        launched = time.perf_counter()

        def done(fut):
            with self._lock:
                self._buckets.append((launched, time.perf_counter()))
            return fut.value()

        return allreduce_hook(None, bucket).then(done)

    @contextlib.contextmanager
    def blocking(self, device: torch.device):
        """Time a collective the loop waits for in full (all of it counts as waiting)."""
        sync(device)
        start = time.perf_counter()
        yield
        sync(device)
        spent = time.perf_counter() - start
        self.busy_s += spent
        self.wait_s += spent

    def end_step(self) -> None:
        """Fold this step's bucket timings in: busy = time any all-reduce was in flight,
        wait = last completion − last launch (the part no computation could hide)."""
        with self._lock:
            buckets, self._buckets = self._buckets, []
        if buckets:
            self.busy_s += merged_length(buckets)
            self.wait_s += max(0.0, max(d for _, d in buckets) - max(start for start, _ in buckets))

    def take(self) -> tuple[float, float]:
        busy, wait = self.busy_s, self.wait_s
        self.busy_s = self.wait_s = 0.0
        return busy, wait


def kernel_comm_times(kernels: list[tuple[float, float, str]]) -> tuple[float, float]:
    """(busy, exposed) from GPU kernels (start, end, name): busy = time any NCCL kernel runs,
    exposed = the part of it during which no other kernel runs."""
    comm = [(a, b) for a, b, name in kernels if "nccl" in name.lower()]
    other = [(a, b) for a, b, name in kernels if "nccl" not in name.lower()]
    busy = merged_length(comm)  # exposed: what of it no other interval covers
    return busy, merged_length(comm + other) - merged_length(other)


class KernelTimer:
    """Communication time on the GPU's clock: ``torch.profiler`` (CUPTI) records every kernel.

    Recording runs in segments (:meth:`start`/:meth:`stop`) so that a paused stretch (saving a
    checkpoint) stays out; each stop adds the segment's busy and exposed NCCL time.
    """

    enabled = True

    def __init__(self) -> None:
        self._prof = None
        self.busy_s = self.wait_s = 0.0

    def start(self) -> None:
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CUDA])
        self._prof.__enter__()

    def stop(self) -> None:
        if self._prof is None:
            return
        from torch.autograd import DeviceType

        self._prof.__exit__(None, None, None)
        events = self._prof.profiler.kineto_results.events()
        self._prof = None
        kernels = [
            (e.start_ns() * 1e-9, (e.start_ns() + e.duration_ns()) * 1e-9, e.name())
            for e in events
            if e.device_type() == DeviceType.CUDA
        ]
        busy, exposed = kernel_comm_times(kernels)
        self.busy_s += busy
        self.wait_s += exposed

    def end_step(self) -> None:
        pass

    def take(self) -> tuple[float, float]:
        busy, wait = self.busy_s, self.wait_s
        self.busy_s = self.wait_s = 0.0
        return busy, wait


@dataclass
class Signals:
    """Measured over one log interval on one rank."""

    steps: int
    seconds: float
    samples_per_s: float
    tokens_per_s: float
    memory: dict[str, float]
    comm_wait_share: float | None  # None where no hook could be attached
    comm_busy_share: float | None

    def line(self) -> str:
        mem = (
            f"GPU peak {self.memory['gpu_peak_mib']:.0f} MiB"
            if "gpu_peak_mib" in self.memory
            else f"RSS {self.memory['rss_mib']:.0f} MiB "
            f"(peak {self.memory['rss_peak_mib']:.0f} MiB)"
        )
        comm = (
            "comm wait n/a (no DDP hook on the CPU)"
            if self.comm_wait_share is None
            else f"comm wait {100 * self.comm_wait_share:.1f}% "
            f"(comm busy {100 * self.comm_busy_share:.1f}%)"
        )
        return (
            f"{self.samples_per_s:.1f} samples/s, {self.tokens_per_s:.1f} tokens/s | {mem} | {comm}"
        )


class Meter:
    """Accumulates steps between reports; ``report()`` returns :class:`Signals` and starts over."""

    def __init__(self, device: torch.device, comm: CommTimer | None = None) -> None:
        """``comm``: the DDP hook timer (gloo); on a GPU a :class:`KernelTimer` is used instead."""
        self.device = device
        self.kernels = KernelTimer() if device.type == "cuda" else None
        self.comm = self.kernels or comm
        self._reset()

    def _reset(self) -> None:
        sync(self.device)
        self.start = time.perf_counter()
        self.excluded = 0.0  # seconds spent in paused() blocks (checkpointing)
        self.steps = self.samples = self.tokens = 0
        if self.comm:
            self.comm.take()
        if self.kernels:
            self.kernels.start()

    def step(self, samples: int, tokens: int) -> None:
        self.steps += 1
        self.samples += samples
        self.tokens += tokens
        if self.comm:
            self.comm.end_step()

    @contextlib.contextmanager
    def paused(self):
        """Leave the block's wall time out of the interval (e.g. saving a checkpoint)."""
        sync(self.device)
        if self.kernels:
            self.kernels.stop()
        start = time.perf_counter()
        yield
        sync(self.device)
        self.excluded += time.perf_counter() - start
        if self.kernels:
            self.kernels.start()

    def close(self) -> None:
        """Stop recording kernels. Call it when training ends: a process that exits while the
        profiler still records crashes in teardown ("pure virtual method called")."""
        if self.kernels:
            sync(self.device)
            self.kernels.stop()

    def report(self) -> Signals:
        sync(self.device)
        if self.kernels:
            self.kernels.stop()
        seconds = max(time.perf_counter() - self.start - self.excluded, 1e-9)
        busy, wait = self.comm.take() if self.comm else (0.0, 0.0)
        measured = bool(self.comm and self.comm.enabled)
        signals = Signals(
            self.steps,
            seconds,
            self.samples / seconds,
            self.tokens / seconds,
            memory_now(self.device),
            min(1.0, wait / seconds) if measured else None,
            min(1.0, busy / seconds) if measured else None,
        )
        self._reset()
        return signals
