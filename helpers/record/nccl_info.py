"""Chapter 8: the ``NCCL_DEBUG=INFO`` log of a run on one GPU (or two), in ch08_nccl_info.json.

    python -m helpers.record nccl_info --record --gpus 1   # one GPU, about 30 s
    python -m helpers.record nccl_info --record --gpus 2   # two ranks: the transport lines too
    python -m helpers.record nccl_info                     # on a CPU machine: says why it cannot

One torchrun of :mod:`helpers.demos.ch08_nccl_info` (``--gpus`` ranks, one GPU each, NCCL, a few
collectives) with :data:`NCCL_ENV` in its environment. :func:`nccl_log` keeps the lines NCCL wrote
into the ranks' output (INFO and WARN lines, the version line), with the host name and IPv4
addresses masked (:func:`mask`); the record keeps them raw, with the demo's report and the
environment, and :mod:`helpers.train.nccl_info` reads them in the notebook. One rank connects to
no peer, so its log has no transport lines; ``--gpus 2`` records them (results/2x<GPU>/, where
exactly two GPUs are visible). Without a CUDA GPU the recorder prints what it would run and stops.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex

from helpers.record import cli
from helpers.record.results import save
from helpers.record.runner import run_one, status, world_mismatch
from helpers.run import env as run_env
from helpers.run.launch import torchrun_command

NAME = "nccl_info"
RECORD = "ch08_nccl_info"
DEMO = "ch08_nccl_info"
TIMEOUT_S = 240.0
# what NCCL prints: initialisation, the variables it read, the network, the graph search, the
# tuner's table and one line per collective (NCCL's src/debug.cc reads both at its first log line)
NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,NET,GRAPH,TUNING,COLL,P2P,SHM"}
NO_GPU = (
    "nccl_info needs one CUDA GPU: NCCL runs only on GPUs, and this machine shows none. "
    "Nothing was run or recorded; on a GPU machine: {command}"
)

_NCCL = re.compile(r"(?:\bNCCL (?:INFO|WARN)\b|^NCCL version \S+)")
_PREFIX_HOST = re.compile(r"^(?P<stamp>\[[^\]]*\] )?(?P<host>[^\s:]+)(?=:\d+:\d+ )")
_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")


def mask(line: str, host: str = "host") -> str:
    """``line`` with the host name of NCCL's prefix replaced by ``host`` and every IPv4 address
    by ``x.x.x.x`` (the record is published with the book)."""
    line = _PREFIX_HOST.sub(lambda m: (m["stamp"] or "") + host, line, count=1)
    return _IPV4.sub("x.x.x.x", line)


def nccl_log(lines: dict[int, list[str]]) -> list[str]:
    """NCCL's lines among a launch's output (rank order, then the launcher's own lines), masked.

    ``lines`` is what :func:`helpers.run.launch.launch` collected: rank -> the rank's lines with
    torchrun's ``[default0]:`` prefix removed; a rank's C library writes to the same stream, so
    NCCL's lines are there among Python's. A version line without NCCL's prefix (the VERSION
    level) counts too."""
    ranks = sorted(r for r in lines if r >= 0) + sorted(r for r in lines if r < 0)
    return [mask(t.rstrip()) for r in ranks for t in lines[r] if _NCCL.search(t)]


@contextlib.contextmanager
def environment(values: dict[str, str]):
    """``values`` in os.environ for the block (the launcher hands the ranks this process's
    environment, :func:`helpers.run.launch.rank_env`), then the old values back."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _read(ok: bool, lines: dict[int, list[str]]) -> dict:
    log = nccl_log(lines)
    return {"nccl_log": log, "nccl_lines": len(log)}


def record(
    save_results: bool, show: str = "none", copy_to: str | None = None, gpus: int = 1
) -> dict | None:
    """One run of the demo on ``gpus`` GPUs with :data:`NCCL_ENV`; with ``save_results`` the
    record (provenance, the run, the environment) goes to results/<hardware>/ch08_nccl_info.json."""
    words = ["--gpus", str(gpus)]
    command = cli.command(NAME, ["--record", *words] if save_results else words)
    launched = " ".join(f"{k}={v}" for k, v in NCCL_ENV.items())
    launched += " " + shlex.join(torchrun_command(DEMO, gpus))
    if run_env.gpu_count() < 1:
        print(f"[{NAME}] would run: {launched}", flush=True)
        raise SystemExit(NO_GPU.format(command=cli.command(NAME, ["--record", *words])))
    wrong = world_mismatch(gpus, save_results)
    if wrong:
        raise SystemExit(f"[{NAME}] {wrong}")
    print(f"[{NAME}] {launched}", flush=True)
    with environment(NCCL_ENV):
        name = f"{gpus} rank(s), NCCL_DEBUG=INFO"
        run = run_one(name, DEMO, gpus, [], TIMEOUT_S, show, beat=False, read_lines=_read)
    run["env"] = dict(NCCL_ENV)
    print(f"[{NAME}] {status(run)}: {run['nccl_lines']} NCCL lines ({run['seconds']} s)")
    for line in run["nccl_log"][:12]:
        print("   ", line)
    if save_results:
        path = save(RECORD, [run], command, copy_to=copy_to)
        print(f"[{NAME}] wrote {path}", flush=True)
    return run


def _check(args) -> None:
    if args.gpus not in (None, 1, 2):
        raise ValueError(f"--gpus 1 (one rank's log) or 2 (the transport lines), not {args.gpus}")


SPEC = cli.Recorder(
    NAME,
    "Chapter 8: the NCCL_DEBUG=INFO lines of a few collectives on one GPU (or two)",
    f"{RECORD}.json",
    lambda a: record(a.record, a.show, a.copy_to, a.gpus or 1),
    flags=("gpus", "copy_to", "show"),
    gpus=1,
    check=_check,
)
