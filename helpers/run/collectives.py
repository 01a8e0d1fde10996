"""Timing the four collectives of Chapter 3 inside a rank: buffers, sizes, and the clock.

Used by ``helpers/demos/ch03_collectives.py``. A size S is bytes of float32, as in nccl-tests:
the all-gather output, the reduce-scatter input, the buffer otherwise. :func:`time_calls` times
each call between a barrier and ``sync(device)``, or, as nccl-tests' ``--timing loop`` does,
``iters`` calls back to back between two syncs.
"""

from __future__ import annotations

import statistics
import time
import warnings

import torch
import torch.distributed as dist

from helpers.cost.comm import alg_bandwidth, bus_bandwidth
from helpers.run.env import sync

CPU_SIZES = "4K,64K,1M,4M"
GPU_SIZES = "1M,16M,256M,1G"
_UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_size(text: str) -> int:
    """'4K' -> 4096, '1M' -> 1048576, '512' -> 512 (binary units)."""
    t = (
        text.strip().upper().removesuffix("IB").removesuffix("B")
        if text.strip()[-1:].isalpha()
        else text.strip()
    )
    unit = t[-1:] if t[-1:].isalpha() else ""
    if unit not in _UNITS or not t[: len(t) - len(unit)].isdigit():
        raise ValueError(f"bad size {text!r}: use bytes or a K/M/G suffix, e.g. 4K,1M")
    return int(t[: len(t) - len(unit)]) * _UNITS[unit]


def run_collective(name: str, size: int, n: int, device: torch.device):
    """Buffers for one collective of S = size bytes (float32) and a callable that runs it once."""
    elems = size // 4
    if name == "all_reduce":
        buf = torch.ones(elems, device=device)
        return lambda: dist.all_reduce(buf)
    if name == "all_gather_into_tensor":
        out, inp = torch.empty(elems, device=device), torch.ones(elems // n, device=device)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if name == "reduce_scatter_tensor":
        out, inp = torch.empty(elems // n, device=device), torch.ones(elems, device=device)
        return lambda: dist.reduce_scatter_tensor(out, inp)
    if name == "all_to_all_single":
        out, inp = torch.empty(elems, device=device), torch.ones(elems, device=device)
        return lambda: dist.all_to_all_single(out, inp)
    raise ValueError(name)


# torch 2.13 deprecates the *_tensor names in favour of *_single; the older names still work.
warnings.filterwarnings(
    "ignore",
    message=r".*is deprecated. Please use `torch.distributed.*_single",
    category=FutureWarning,
)
COLLECTIVES = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")


def time_calls(op, device: torch.device, iters: int, rounds: int | None) -> list[float]:
    """Seconds per call: ``iters`` single calls between barrier and sync (rounds=None), or
    ``rounds`` loops of ``iters`` back-to-back calls, each loop's time divided by ``iters``
    (nccl-tests' way)."""
    times = []
    for _ in range(iters if rounds is None else rounds):
        dist.barrier()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(1 if rounds is None else iters):
            op()
        sync(device)
        times.append((time.perf_counter() - t0) / (1 if rounds is None else iters))
    return times


def check_sizes(sizes: list[int], n: int) -> None:
    """Every size must split into float32 pieces over ``n`` ranks."""
    for s in sizes:
        if s % (4 * n):
            raise ValueError(
                f"size {s} B must be a multiple of 4·n = {4 * n} (float32 split over {n} ranks)"
            )


def measure(sizes: list[int], n: int, device, warmup: int, iters: int, rounds: int | None):
    """Every collective at every size: rows (name, size, median s, algbw, busbw, fastest s),
    each call's time the slowest rank's (all-reduce MAX: a collective ends when its last rank
    does)."""
    rows = []
    for name in COLLECTIVES:
        for size in sizes:
            op = run_collective(name, size, n, device)
            for _ in range(warmup):
                op()
            sync(device)
            times = time_calls(op, device, iters, rounds)
            slowest = torch.tensor(times, dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            t = statistics.median(slowest.tolist())
            alg, bus = alg_bandwidth(size, t), bus_bandwidth(name, size, n, t)
            rows.append((name, size, t, alg, bus, min(slowest.tolist())))
    return rows


def link_rates(nbytes: int, per_host: int, repeats: int) -> dict[str, float]:
    """Bytes/s of one send from rank 0 to rank 1 (same host) and to rank ``per_host`` (the next
    host), alone on the wire, the median of ``repeats``, timed by the receiver (Chapter 5's
    mesh-order measurement)."""
    rank, buf = dist.get_rank(), torch.ones(nbytes // 4)
    rates = {}
    for path, peer in (("inside", 1), ("across", per_host)):
        times = []
        for _ in range(repeats):
            dist.barrier()
            start = time.perf_counter()
            if rank == 0:
                dist.send(buf, peer)
            elif rank == peer:
                dist.recv(buf, 0)
            took = torch.tensor([time.perf_counter() - start if rank == peer else 0.0])
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            times.append(float(took))
        rates[path] = nbytes / statistics.median(times)
    return rates


def pair_rows(pairs: dict, sizes: dict, iters: int, loops: int) -> list[dict]:
    """All-reduce times per path and size on the CPU, every pair of a path at once as in
    training (``pairs[path]``: this rank's pair group; ``sizes[path]``: a host's loopback needs
    larger messages than a shaped link to show its bandwidth): ``loops`` loops of ``iters`` calls
    back to back (:func:`time_calls`), so the pairs overlap and share the link even when a rank
    starts late; a loop's time the slowest rank's, the median loop's per call."""
    rows = []
    for path, group in pairs.items():
        for size in sizes[path]:
            buf = torch.ones(size // 4)
            op = lambda: dist.all_reduce(buf, group=group)  # noqa: E731
            op()
            slowest = torch.tensor(time_calls(op, torch.device("cpu"), iters, loops))
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            rows.append(
                {"path": path, "collective": "all_reduce", "size_bytes": size, "n": 2,
                 "seconds": statistics.median(slowest.tolist())}
            )  # fmt: skip
    return rows
