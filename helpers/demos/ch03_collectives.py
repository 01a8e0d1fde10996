"""Micro-benchmark of the four collectives: median time, algbw and busbw per message size.

Chapter 3. For each of all_reduce, all_gather_into_tensor, reduce_scatter_tensor and all_to_all_single
and each size S (bytes, float32; S is the all-gather output, the reduce-scatter input, the buffer
otherwise, as in nccl-tests), every rank runs ``--warmup`` untimed calls, then ``--iters`` timed
calls, each between a barrier and ``sync(device)``. A call's time is the slowest rank's (all-reduce
MAX), and the median over calls is reported. ``--timing loop`` times as nccl-tests does instead:
``--iters`` calls back to back between two syncs, divided by ``--iters``, repeated ``--rounds`` times
(the median round is reported); it removes the per-call barrier and host round trip that dominate
small messages on a GPU with algbw = S/t and busbw = algbw × the factor of
:func:`helpers.cost.comm.bus_factor`. Rank 0 prints a table, a latency/bandwidth fit per collective
(:func:`helpers.cost.comm.fit_link`) and emits one RESULT per collective and size. Timings vary from
run to run: this is a benchmark, not a test.

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch03_collectives --sizes 4K,1M
"""

import argparse
import statistics
import time
import warnings

import torch
import torch.distributed as dist

from helpers.cost.comm import alg_bandwidth, bus_bandwidth, bus_factor, fit_link
from helpers.run.env import distributed, emit, say, sync

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
    """Seconds per call: ``iters`` single calls between barrier and sync (rounds=None), or ``rounds``
    loops of ``iters`` back-to-back calls, each loop's time divided by ``iters`` (nccl-tests' way)."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default=None,
        help=f"comma-separated bytes (default CPU {CPU_SIZES}, GPU {GPU_SIZES})",
    )
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument(
        "--timing",
        choices=["call", "loop"],
        default="call",
        help="call: each call between barrier and sync; loop: --iters calls back to back (nccl-tests)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="loop timing: repeats of the --iters loop"
    )
    args = parser.parse_args()

    with distributed() as env:
        n = env.world_size
        sizes = [
            parse_size(s)
            for s in (args.sizes or (GPU_SIZES if env.is_gpu else CPU_SIZES)).split(",")
        ]
        for s in sizes:
            if s % (4 * n):
                raise ValueError(
                    f"size {s} B must be a multiple of 4·n = {4 * n} (float32 split over {n} ranks)"
                )
        rows = []
        for name in COLLECTIVES:
            for size in sizes:
                op = run_collective(name, size, n, env.device)
                for _ in range(args.warmup):
                    op()
                sync(env.device)
                times = time_calls(
                    op, env.device, args.iters, args.rounds if args.timing == "loop" else None
                )
                slowest = torch.tensor(times, dtype=torch.float64, device=env.device)
                dist.all_reduce(
                    slowest, op=dist.ReduceOp.MAX
                )  # a collective ends when its last rank does
                t = statistics.median(slowest.tolist())
                rows.append(
                    (
                        name,
                        size,
                        t,
                        alg_bandwidth(size, t),
                        bus_bandwidth(name, size, n, t),
                        min(slowest.tolist()),
                    )
                )

        if env.rank == 0:
            how = (
                f"median of {args.rounds} loops of {args.iters} back-to-back calls"
                if args.timing == "loop"
                else f"median of {args.iters} calls"
            )
            say(
                f"collectives on {n} ranks ({env.backend}, {env.device.type}), {how} after {args.warmup} warm-up"
            )
            say(
                f"{'collective':<24}{'size':>10}{'time us':>12}{'algbw GB/s':>12}{'busbw GB/s':>12}"
            )
            for name, size, t, alg, bus, fastest in rows:
                say(f"{name:<24}{size:>10}{t * 1e6:>12.1f}{alg / 1e9:>12.3f}{bus / 1e9:>12.3f}")
                emit(
                    collective=name,
                    size_bytes=size,
                    n=n,
                    seconds=t,
                    seconds_min=fastest,
                    algbw=alg,
                    busbw=bus,
                    factor=bus_factor(name, n),
                    backend=env.backend,
                    timing=args.timing,
                )
            for name in COLLECTIVES:
                pts = [(size, t) for c, size, t, *_ in rows if c == name]
                try:
                    link = fit_link(pts, name, collective=name, n=n)
                    say(
                        f"fit {name:<24} latency {link.latency_s * 1e6:8.1f} us  busbw {link.bandwidth_bytes_per_s / 1e9:8.3f} GB/s"
                    )
                except ValueError as e:
                    say(f"fit {name:<24} n/a ({e})")


if __name__ == "__main__":
    main()
