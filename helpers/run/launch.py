"""Run a demo under torchrun from a notebook or a test, and collect what its ranks report.

Used by every chapter's notebook. ``launch("ch01_dp", nproc=2)`` runs

    python -m torch.distributed.run --standalone --nproc_per_node 2 --tee 3 -m helpers.demos.ch01_dp

in a process group of its own, streams the ranks' lines live (rank 0 by default), kills every
rank when the timeout passes, and returns the ``RESULT {json}`` lines sorted by rank. When a rank
fails, :class:`LaunchError` shows that rank's own traceback, not torchrun's summary.

torchrun starts each worker in a new session, so killing torchrun's process group is not
enough: the launcher keeps the pids of all descendants it has seen and kills those too.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from helpers.run import cli, shared
from helpers.run.env import is_result, placement_env, results_of
from helpers.run.failure import LAUNCHER, failing_rank
from helpers.run.tail import Joiner
from helpers.run.kernels import timeout_hint

REPO_ROOT = Path(__file__).resolve().parents[2]
_RANK_LINE = re.compile(r"^\[(?:rank|default)(\d+)\]:(.*)$")
QUIET_ENV = {
    "PYTHONWARNINGS": "ignore",
    "TRANSFORMERS_VERBOSITY": "error",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
}


class LaunchError(RuntimeError):
    """A demo failed: a rank crashed, printed no result, or ran past its timeout."""

    def __init__(
        self, message: str, rank: int | None, lines: dict[int, list[str]], returncode: int | None
    ):
        super().__init__(message)
        self.rank = rank
        self.lines = lines
        self.returncode = returncode


class LaunchTimeout(LaunchError):
    """The demo ran longer than ``timeout_s``; every rank was killed."""


@dataclass
class LaunchResult:
    demo: str
    nproc: int
    seconds: float
    results: list[dict]  # every RESULT line, sorted by rank (stable within a rank)
    lines: dict[int, list[str]] = field(repr=False)

    def rank(self, r: int) -> list[dict]:
        """The results rank ``r`` emitted, in order."""
        cli.count("r", r, 0, "a rank")
        return [x for x in self.results if x["rank"] == r]

    def first(self, r: int = 0) -> dict:
        """The first result of rank ``r``."""
        found = self.rank(r)
        if not found:
            raise KeyError(f"rank {r} emitted no RESULT")
        return found[0]


def demo_module(demo: str) -> str:
    """The module a demo name launches: ``ch05_train`` -> ``helpers.demos.ch05_train``."""
    return demo if demo.startswith("helpers.") else f"helpers.demos.{demo}"


def torchrun_command(
    demo: str, nproc: int, args: list[str] | tuple[str, ...] = (), log_dir: str | None = None
) -> list[str]:
    """The exact command line the launcher runs (shown in the book, recorded with GPU results)."""
    nproc, log_dir = cli.count("nproc", nproc), log_dir and str(cli.folder("log_dir", log_dir))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "--tee=3",
    ]
    if log_dir:
        cmd.append(f"--log-dir={log_dir}")
    return cmd + ["-m", demo_module(demo), *map(str, args)]


def rank_env(
    nproc: int, extra: dict[str, str] | None = None, force: str | None = None
) -> dict[str, str]:
    """The ranks' environment: this process's, the placement rule's, then ``extra``.

    :func:`helpers.run.env.placement` decides GPU+NCCL (``nproc`` <= GPUs) or CPU+gloo with CUDA
    hidden (``nproc`` > GPUs) once, here, for every demo.
    """
    cli.count("nproc", nproc)
    return {**os.environ, **placement_env(nproc, force=force), **(extra or {})}


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _kill_all(procs: list[psutil.Process], grace_s: float = 3.0) -> None:
    alive = [p for p in procs if p.is_running()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in alive:
            try:
                p.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(alive, timeout=grace_s)
        if not alive:
            return


def _tail(lines: list[str], n: int = 40) -> str:
    return "\n".join(lines[-n:])


def launch(
    demo: str,
    nproc: int = 2,
    args: list[str] | tuple[str, ...] = (),
    timeout_s: float = 120.0,
    show: str = "rank0",
    env: dict[str, str] | None = None,
    expect_results: bool = True,
    share: bool = True,
) -> LaunchResult:
    """Run ``helpers.demos.<demo>`` on ``nproc`` local ranks and return their results.

    show: "rank0" streams rank 0's lines, "all" streams every rank's lines prefixed with
    ``[rankN]``, "none" streams nothing. RESULT lines are collected, not shown.
    share: within a test run (``BOOK_SHARED_RUNS`` set), an identical earlier launch answers
    instead of a new run (:mod:`helpers.run.shared`); ``share=False`` always runs. Arguments are
    checked first (:func:`helpers.run.cli.check_launch`): a ValueError names the bad one.
    """
    cli.check_launch(demo, nproc, args, timeout_s, env)
    if show not in ("rank0", "all", "none"):
        raise ValueError(f"show must be 'rank0', 'all' or 'none', not {show!r}")
    args = [str(a) for a in args]
    plan = (
        shared.plan(demo, nproc, args, {**placement_env(nproc), **(env or {})}) if share else None
    )
    with shared.claimed(plan):  # an identical launch asked for meanwhile waits for this one
        if plan and show != "all" and (stored := shared.load(plan)) is not None:
            shared.replay(stored, show, args)  # what the first run printed, "✓" line included
            return LaunchResult(**stored)
        launched = _torchrun(demo, nproc, args, timeout_s, show, env, expect_results)
        shared.keep(plan, asdict(launched), args)
    return launched


def _torchrun(demo, nproc, args, timeout_s, show, env, expect_results) -> LaunchResult:
    """One torchrun of :func:`launch`, its output read live; raises on a timeout or a failure."""
    log_dir = tempfile.mkdtemp(prefix="book-torchrun-")
    cmd = torchrun_command(demo, nproc, args, log_dir=log_dir)
    child_env = rank_env(nproc, env)
    child_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), child_env.get("PYTHONPATH")])
    )
    child_env.setdefault("OMP_NUM_THREADS", "1")
    for name, value in QUIET_ENV.items():  # library chatter is not part of a demo's output
        child_env.setdefault(name, value)
    child_env["PYTHONUNBUFFERED"] = "1"

    start = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        env=child_env,
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    out: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_pump, args=(proc.stdout, out), daemon=True)
    reader.start()

    lines: dict[int, list[str]] = {}
    joiner = Joiner()  # long lines reach us in pieces (helpers.run.tail)
    seen: dict[int, psutil.Process] = {}
    timed_out = False
    try:  # TimeoutExpired from the wait above counts as a timeout too
        while True:
            for p in _descendants(proc.pid):
                seen.setdefault(p.pid, p)
            if time.monotonic() - start > timeout_s:
                timed_out = True
                break
            try:
                raw = out.get(timeout=0.2)
            except queue.Empty:
                continue
            if raw is None:  # output closed: torchrun is exiting, let it finish its summary
                for line in joiner.rest():  # a rank cut off mid-line: its piece, never a result
                    _take_line(line.replace("]:RESULT", "]:(cut) RESULT", 1), lines, show)
                proc.wait(timeout=max(1.0, timeout_s - (time.monotonic() - start)))
                break
            for line in joiner.feed(raw.rstrip("\n")):
                _take_line(line, lines, show)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:  # also on KeyboardInterrupt: never leave a rank behind
        tree = list(seen.values()) + _descendants(proc.pid)
        if proc.poll() is None:
            tree.append(psutil.Process(proc.pid))
        _kill_all([p for p in tree if p.is_running()])
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        shutil.rmtree(log_dir, ignore_errors=True)

    seconds = time.monotonic() - start
    name = cmd[cmd.index("-m", 3) + 1]
    if timed_out:
        running = sorted(r for r in lines if r != LAUNCHER)
        raise LaunchTimeout(
            f"{name} ran past its {timeout_s:g} s timeout; all {nproc} ranks were killed.\n"
            f"Ranks that printed something: {running}. Last lines:\n"
            + "\n".join(f"[rank{r}] {_tail(lines[r], 5)}" for r in running)
            + (f"\n{hint}" if (hint := timeout_hint(lines)) else ""),
            None,
            lines,
            None,
        )
    if proc.returncode != 0:
        rank = failing_rank(lines)
        shown = lines.get(rank, []) if rank is not None else lines.get(LAUNCHER, [])
        raise LaunchError(
            f"{name} failed (exit code {proc.returncode})"
            + (f" on rank {rank}" if rank is not None else "")
            + f". Its output:\n{_tail(shown)}",
            rank,
            lines,
            proc.returncode,
        )
    results = [r for rank, said in lines.items() if rank != LAUNCHER for r in results_of(said)]
    if expect_results and not results:
        raise LaunchError(
            f"{name} exited cleanly but printed no RESULT line: a demo must report through "
            f"helpers.run.env.emit(...). Rank 0's output:\n{_tail(lines.get(0, []))}",
            None,
            lines,
            proc.returncode,
        )
    results.sort(key=lambda x: x["rank"])
    if show != "none":
        print(f"✓ {name} on {nproc} rank(s) in {seconds:.1f} s")
    return LaunchResult(name, nproc, seconds, results, lines)


def _pump(stream, out: queue.Queue) -> None:
    """Every line of ``stream`` into ``out``, then None when it closes."""
    for line in stream:
        out.put(line)
    out.put(None)


def _take_line(line: str, lines: dict[int, list[str]], show: str) -> None:
    m = _RANK_LINE.match(line)
    rank, text = (int(m.group(1)), m.group(2)) if m else (LAUNCHER, line)
    text = text.removeprefix(f"[rank{rank}]: ")  # torch's excepthook prefixes tracebacks itself
    lines.setdefault(rank, []).append(text)
    if rank != LAUNCHER and is_result(text):  # read back at the end (helpers.run.env.results_of)
        return
    if show == "all" and rank != LAUNCHER:
        print(f"[rank{rank}] {text}", flush=True)
    elif show == "rank0" and rank == 0:
        print(text, flush=True)
