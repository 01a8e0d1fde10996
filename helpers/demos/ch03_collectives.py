"""Micro-benchmark of the four collectives: median time, algbw and busbw per message size.

Chapter 3. For each of all_reduce, all_gather_into_tensor, reduce_scatter_tensor and
all_to_all_single and each size S (bytes, float32; S is the all-gather output, the reduce-scatter
input, the buffer otherwise, as in nccl-tests), every rank runs ``--warmup`` untimed calls, then
``--iters`` timed calls, each between a barrier and ``sync(device)``
(:mod:`helpers.run.collectives`). A call's time is the slowest rank's (all-reduce MAX), and the
median over calls is reported. ``--timing loop`` times as nccl-tests does instead: ``--iters``
calls back to back between two syncs, divided by ``--iters``, repeated ``--rounds`` times (the
median round is reported); it removes the per-call barrier and host round trip that dominate
small messages on a GPU with algbw = S/t and busbw = algbw × the factor of
:func:`helpers.cost.comm.bus_factor`. Rank 0 prints a table, a latency/bandwidth fit per
collective (:func:`helpers.cost.comm.fit_link`) and emits one RESULT per collective and size.
Timings vary from run to run: this is a benchmark, not a test.

    torchrun --nproc_per_node 2 -m helpers.demos.ch03_collectives --sizes 4K,1M
"""

from helpers.cost.comm import bus_factor, fit_link
from helpers.run import cli
from helpers.run.collectives import (
    COLLECTIVES,
    CPU_SIZES,
    GPU_SIZES,
    check_sizes,
    measure,
    parse_size,
)
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch03 import CollectiveResult


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument(
        "--sizes",
        default=None,
        help=f"comma-separated bytes (default CPU {CPU_SIZES}, GPU {GPU_SIZES})",
    )
    cli.add(parser, "warmup", 3, help=None)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument(
        "--timing",
        choices=["call", "loop"],
        default="call",
        help="call: each call between barrier and sync; loop: --iters calls back to back "
        "(nccl-tests)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="loop timing: repeats of the --iters loop"
    )
    args = parser.parse_args()

    with distributed() as env:
        n = env.world_size
        default = GPU_SIZES if env.is_gpu else CPU_SIZES
        sizes = [parse_size(s) for s in (args.sizes or default).split(",")]
        check_sizes(sizes, n)
        rounds = args.rounds if args.timing == "loop" else None
        rows = measure(sizes, n, env.device, args.warmup, args.iters, rounds)

        if env.rank == 0:
            how = (
                f"median of {args.rounds} loops of {args.iters} back-to-back calls"
                if args.timing == "loop"
                else f"median of {args.iters} calls"
            )
            say(
                f"collectives on {n} ranks ({env.backend}, {env.device.type}), {how} "
                f"after {args.warmup} warm-up"
            )
            say(
                f"{'collective':<24}{'size':>10}{'time us':>12}{'algbw GB/s':>12}{'busbw GB/s':>12}"
            )
            for name, size, t, alg, bus, fastest in rows:
                say(f"{name:<24}{size:>10}{t * 1e6:>12.1f}{alg / 1e9:>12.3f}{bus / 1e9:>12.3f}")
                emit(
                    CollectiveResult,
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
                        f"fit {name:<24} latency {link.latency_s * 1e6:8.1f} us  "
                        f"busbw {link.bandwidth_bytes_per_s / 1e9:8.3f} GB/s"
                    )
                except ValueError as e:
                    say(f"fit {name:<24} n/a ({e})")


if __name__ == "__main__":
    main()
