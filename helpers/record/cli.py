"""One command line for the book's GPU recorders: ``python -m helpers.record <name> [flags]``.

    python -m helpers.record --list                                 # the recorders
    python -m helpers.record ch07 --record --gpus 1 --budget_s 180  # one recording

Each recorder module (``helpers/record/<name>.py``) registers itself with a module-level ``SPEC``, a
:class:`Recorder`: what it records, the record it writes, which of the shared flags it takes and
their defaults, its own flags and the function that records. The shared flags mean the same for
every recorder: ``--record`` writes results/<hardware>/<record>.json (without it the runs are only
shown), ``--quick`` small runs of the same code paths, ``--only`` some of its runs (or parts),
``--budget_s`` no run started after that many seconds, ``--gpus N`` the world size of every run (a
record written only where exactly N GPUs are visible, :func:`helpers.record.runner.world_mismatch`),
``--copy_to DIR`` every saved record also copied there (a lent device's $OUT), ``--show`` the ranks'
output streamed.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from helpers.record.commands import PROG
from helpers.record.runner import world_mismatch

# the recorders: every module of this package that registers a SPEC, read (not imported) from the
# files, in file-name order; a new recorder is one new module
NAMES = tuple(
    sorted(
        f.stem
        for f in Path(__file__).parent.glob("*.py")
        if "\nSPEC = cli.Recorder(" in f.read_text()
    )
)
FLAGS = ("quick", "only", "budget_s", "gpus", "copy_to", "show")  # the shared ones, --record aside


@dataclass(frozen=True)
class Recorder:
    """A recorder's registration: ``record(args)`` records what the parsed flags ask for.

    ``flags``: the shared flags it takes (of :data:`FLAGS`) with their defaults ``budget_s`` (None:
    no limit), ``gpus`` (the world size without ``--gpus``) and ``show``; ``only``: the names
    ``--only`` picks from; ``extra(parser)``: its own flags; ``check(args)``: raises ValueError for
    flags that do not go together. ``one_gpu``: its command in the book's one-GPU device call
    (:func:`one_gpu_commands`), with ``one_gpu_budget_s`` (None: what the
    recorders with a budget of their own leave)."""

    name: str
    summary: str
    writes: str
    record: Callable[[argparse.Namespace], object]
    flags: tuple[str, ...] = ()
    quick: str = "small runs of the same code paths"
    only: tuple[str, ...] = ()
    budget_s: float | None = None
    gpus: int | None = None
    show: str = "none"
    extra: Callable[[argparse.ArgumentParser], None] | None = None
    check: Callable[[argparse.Namespace], None] | None = None
    one_gpu: str | None = None
    one_gpu_budget_s: float | None = None


def spec(name: str) -> Recorder:
    """The registration of recorder ``name`` (``helpers.record.<name>.SPEC``)."""
    if name not in NAMES:
        raise ValueError(f"unknown recorder {name!r}: one of {', '.join(NAMES)}")
    return importlib.import_module(f"helpers.record.{name}").SPEC


def command(name: str, words: Iterable[str] = ()) -> str:
    """A recording's command line as its record's provenance and the book show it."""
    return shlex.join([*PROG.split(), name, *words])


def parser(name: str) -> argparse.ArgumentParser:
    """Recorder ``name``'s command line: ``--record``, the shared flags it takes, its own."""
    s = spec(name)
    unknown = set(s.flags) - set(FLAGS)
    if unknown:
        raise ValueError(f"{name}: no shared flag {sorted(unknown)}; they are {FLAGS}")
    p = argparse.ArgumentParser(prog=f"{PROG} {name}", description=s.summary)
    p.set_defaults(quick=False, only=None, budget_s=s.budget_s, gpus=None, copy_to=None)
    p.set_defaults(show=s.show)
    p.add_argument("--record", action="store_true", help=f"write results/<hardware>/{s.writes}")
    if "quick" in s.flags:
        p.add_argument("--quick", action="store_true", help=s.quick)
    if "only" in s.flags:
        p.add_argument(
            "--only",
            nargs="+",
            choices=s.only or None,
            metavar="NAME",
            help="record only these: " + "; ".join(s.only),
        )
    if "budget_s" in s.flags:
        default = "no limit" if s.budget_s is None else f"{s.budget_s:g}"
        p.add_argument(
            "--budget_s",
            type=float,
            default=s.budget_s,
            help=f"no run is started after this many seconds (default: {default})",
        )
    if "gpus" in s.flags:
        p.add_argument(
            "--gpus",
            type=int,
            default=None,
            help=f"world size of every run (default {s.gpus}); runs that need more are not run",
        )
    if "copy_to" in s.flags:
        p.add_argument("--copy_to", help="also copy every saved record here (e.g. $OUT)")
    if "show" in s.flags:
        p.add_argument(
            "--show",
            choices=("none", "rank0", "all"),
            default=s.show,
            help="stream the ranks' output",
        )
    if s.extra is not None:
        s.extra(p)
    return p


def parse(name: str, argv: list[str]) -> tuple[Recorder, argparse.Namespace]:
    """Recorder ``name`` and its parsed flags (argparse exits on a usage error)."""
    s, p = spec(name), parser(name)
    args = p.parse_args(argv)
    wrong = world_mismatch(args.gpus, args.record) if "gpus" in s.flags else None
    if wrong:
        p.error(wrong)
    try:
        if s.check is not None:
            s.check(args)
    except ValueError as e:
        p.error(str(e))
    return s, args


def listing() -> str:
    """One paragraph per recorder: its name, what it records, what it writes, its flags."""
    out = []
    for s in map(spec, NAMES):
        flags = " ".join(f"--{f}" for f in ("record", *s.flags))
        out.append(f"{s.name:<9} {s.summary}\n{'':9} writes {s.writes}\n{'':9} flags: {flags}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    """``python -m helpers.record <name> [flags]`` or ``python -m helpers.record --list``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "--list"):
        if argv[:1] != ["--list"]:
            print(f"usage: {PROG} <name> [--record] [flags]   ({PROG} <name> -h: its flags)\n")
        print(listing())
        return
    if argv[0] not in NAMES:
        raise SystemExit(f"{PROG}: unknown recorder {argv[0]!r}; {PROG} --list shows them")
    s, args = parse(argv[0], argv[1:])
    s.record(args)


# the one-GPU device call's recorders, all three (a call may run 600 s; the kit installs first)
ONE_GPU_TOTAL_S = 480


def one_gpu_commands(total_s: float = ONE_GPU_TOTAL_S) -> list[str]:
    """The one-GPU recorders' commands for the book's device call, in order, each with
    ``--budget_s``: those registered with a budget of their own (Chapter 9's ResNet, the flagship),
    then the one that takes what is left of ``total_s`` (Chapter 7's memory layouts: ``$END``, set
    by :func:`one_gpu_device_command`, minus the time now). The layouts run in order of importance,
    so the ones a long flagship leaves no time for come last. Each recorder registers its command
    in its :class:`Recorder` (``one_gpu``, ``one_gpu_budget_s``)."""
    specs = [s for s in map(spec, NAMES) if s.one_gpu]
    own = [s for s in specs if s.one_gpu_budget_s is not None]
    return [f"{s.one_gpu} --budget_s {s.one_gpu_budget_s:g}" for s in own] + [
        f"{s.one_gpu} --budget_s $(( END - $(date +%s) ))"
        for s in specs
        if s.one_gpu_budget_s is None
    ]


def one_gpu_device_command(
    commit: str = "<commit>", out: str = '"$OUT"', total_s: float = ONE_GPU_TOTAL_S
) -> str:
    """One bash line for a lent one-GPU machine: the kit, the commit for the provenance, the
    deadline ``END`` (``total_s`` from after the kit), then every recorder of
    :func:`one_gpu_commands` with ``--copy_to`` (each save also lands in $OUT). ``;`` between
    recorders: one that fails does not stop the next."""
    runs = " ; ".join(f"{c} --copy_to {out}" for c in one_gpu_commands(total_s))
    return (
        f"source .gpu-kit/activate.sh && export BOOK_GIT_COMMIT={commit} "
        f"&& END=$(( $(date +%s) + {total_s:g} )) && {runs}"
    )
