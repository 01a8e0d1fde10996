"""Chapter 8, "Hang forensics": two hangs, each dumped by the Flight Recorder while it hangs.

    torchrun --nproc_per_node 2 -m helpers.demos.ch08_flight --lab skip --dir D
    torchrun --nproc_per_node 4 -m helpers.demos.ch08_flight --lab pipeline --micro 2 \\
        --bypass_rule --dir D

``skip``: Chapter 8's collective-mismatch lab. Rank 1 skips step 1's gradient all-reduces (a rank
that ``continue``s past an empty batch); gloo pairs its later all-reduces with rank 0's earlier
ones, rank 1 reaches its end-of-training barrier while rank 0 is still in step 3, and both wait.

``pipeline``: a 1F1B pipeline of P = world-size stages with ``--micro`` m micro-batches, whose
cool-down runs the formula's P-1-s backwards instead of the warm-up's min(P-1-s, m)
(``--schedule naive``, :func:`helpers.train.flight_labs.naive_1f1b`; ``capped`` is the book's
:func:`helpers.parallel.pp_schedules.one_f_one_b`).
For m ≥ P-1 the two are the same; for fewer, stage 0 waits for the gradient of a micro-batch that
does not exist while the other stages finish the step and wait in its closing all-reduce. The
book's layout rule "at least as many micro-batches as stages"
(:func:`helpers.train.flight_labs.rule_says`) refuses m < P; ``--bypass_rule`` runs it.

On gloo a :class:`helpers.train.flight_recorder.Watchdog` dumps each rank's Flight Recorder buffer
and thread stacks into ``--dir`` once a collective has been pending ``--stall_s`` seconds; the
ranks then fail at the process group's ``--timeout_s`` and report. With ``--backend nccl`` (one
GPU per rank) no thread is started: the launcher sets ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` and
``TORCH_FR_DUMP_TEMP_FILE`` and NCCL's watchdog writes the same files
(:func:`helpers.chapters.ch08_flight.nccl_env`).
"""

import os
import sys

from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch08 import FlightResult
from helpers.train import flight_labs as fl
from helpers.train import flight_recorder as fr


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--lab", choices=("skip", "pipeline"), required=True)
    parser.add_argument("--dir", required=True, help="where the dumps go")
    parser.add_argument("--micro", type=int, default=2, help="pipeline micro-batches m")
    parser.add_argument("--schedule", choices=("naive", "capped"), default="naive")
    parser.add_argument("--bypass_rule", action="store_true", help="run m < P anyway")
    parser.add_argument("--stall_s", type=float, default=fr.STALL_S, help="pending this long: dump")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    cli.add(parser, "timeout_s", 6.0)
    cli.add(parser, "steps", 4)
    args = parser.parse_args()
    with distributed(backend=args.backend, timeout_s=args.timeout_s) as env:
        out = {"lab": args.lab, "backend": env.backend, "world_size": env.world_size}
        if args.lab == "pipeline":
            out["rule"] = fl.rule_says(env.world_size, args.micro)
            if out["rule"] and not args.bypass_rule:
                raise SystemExit(f"refused: {out['rule']} (--bypass_rule runs it anyway)")
            actions = fl.SCHEDULES[args.schedule](env.world_size, args.micro)[env.rank]
            out["actions"] = [a.label() for a in actions]
        watchdog = fr.Watchdog(args.dir, args.stall_s) if env.backend == "gloo" else None
        if watchdog:
            watchdog.start()
        done: list[str] = []
        try:
            if args.lab == "skip":
                fl.skip_loop(env, args.steps, done)
            else:
                fl.pipeline_step(env, actions, args.micro, done)
        except Exception as e:  # the process group's timeout: report, then leave at once
            out.update(done=done, error=str(e).strip().splitlines()[0][:300])
            out["dumped"] = watchdog.reason if watchdog else ""
            emit(FlightResult, **out)
            if env.rank == 0:
                say(f"{args.lab}: rank 0 stopped after {done[-1] if done else 'nothing'}")
            sys.stdout.flush()
            os._exit(0)  # a group with a timed-out collective cannot be torn down cleanly
        if watchdog:
            watchdog.stop()
        out.update(done=done, error="", dumped=watchdog.reason if watchdog else "")
        emit(FlightResult, **out)


if __name__ == "__main__":
    main()
