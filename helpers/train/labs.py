"""Chapter 8's failure labs: each failure produced on purpose in a subprocess, its log captured.

``run_lab(name)`` starts the failing command (:mod:`helpers.demos.ch08_fail`, under torchrun or
as hand-started ranks), waits at most ``timeout_s``, kills whatever is left of the process tree,
and returns the merged log with :func:`helpers.train.diagnose.diagnose`'s verdict. Every lab sets
short timeouts itself (5 s for the process group), so each ends in seconds on an idle CPU.

Labs: ``init_hang`` (WORLD_SIZE=2 but one process started), ``collective_mismatch`` (rank 1
skips an all-reduce), ``port_in_use`` (MASTER_PORT held by another socket), ``rank_crash``
(rank 1 SIGKILLed at step 2), ``nan_loss`` (learning rate 30), ``cpu_oom`` and its fix
``cpu_oom_recompute`` (an address-space cap on the process, with and without recomputation),
``stale_kernel_lock`` and its fix ``stale_kernel_lock_cleared``
(:mod:`helpers.demos.ch08_kernel_lock`: torch's kernel-build lock left by a SIGKILLed build, a
second run waiting on it for the lab's 3 s timeout, then :func:`helpers.run.build_lock.clear_stale`
and a third run that finishes).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import psutil

from helpers.train.diagnose import Diagnosis, diagnose
from helpers.run.launch import QUIET_ENV, REPO_ROOT, _descendants, _kill_all, rank_env
from helpers.run.shared import once

DEMO = "helpers.demos.ch08_fail"
KERNEL_LOCK_DEMO = "helpers.demos.ch08_kernel_lock"
LABS = (
    "init_hang",
    "collective_mismatch",
    "port_in_use",
    "rank_crash",
    "nan_loss",
    "cpu_oom",
    "cpu_oom_recompute",
    "stale_kernel_lock",
    "stale_kernel_lock_cleared",
)
EXPECTED = {
    "init_hang": "init_hang",
    "collective_mismatch": "collective_mismatch",
    "port_in_use": "port_in_use",
    "rank_crash": "rank_crash",
    "nan_loss": "nan_loss",
    "cpu_oom": "out_of_memory",
    "stale_kernel_lock": "stale_kernel_lock",
}


@dataclass
class LabRun:
    name: str
    command: list[str]
    returncode: int | None  # None: killed at the lab's timeout
    seconds: float
    log: str
    diagnosis: Diagnosis

    def tail(self, n: int = 6, contains: str | None = None) -> str:
        """The last ``n`` log lines (only those containing ``contains`` if given)."""
        lines = [
            ln
            for ln in self.log.splitlines()
            if ln.strip() and (contains is None or contains in ln)
        ]
        return "\n".join(lines[-n:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(nproc: int, args: list[str], port: int | None = None) -> list[str]:
    where = (
        ["--standalone"]
        if port is None
        else ["--nnodes=1", "--master_addr=127.0.0.1", f"--master_port={port}"]
    )
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        *where,
        f"--nproc_per_node={nproc}",
        "-m",
        DEMO,
        *args,
    ]


def lab_command(name: str, port: int | None = None) -> tuple[list[str], dict[str, str]]:
    """(command, extra environment) of a lab."""
    if name == "init_hang":  # one process started by hand, but it is told the world has two
        return [sys.executable, "-m", DEMO, "--mode", "ok", "--timeout_s", "5"], {
            "RANK": "0",
            "WORLD_SIZE": "2",
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port or _free_port()),
        }
    if name == "collective_mismatch":
        return _torchrun(2, ["--mode", "skip", "--timeout_s", "5"]), {}
    if name == "port_in_use":
        return _torchrun(2, ["--mode", "ok"], port=port), {}
    if name == "rank_crash":
        return _torchrun(2, ["--mode", "crash", "--timeout_s", "5"]), {}
    if name == "nan_loss":
        return _torchrun(2, ["--mode", "nan", "--timeout_s", "5"]), {}
    if name in ("cpu_oom", "cpu_oom_recompute"):
        # a fixed mmap threshold: glibc returns freed tensors to the OS, so the cap sees live
        # memory only
        return [sys.executable, "-m", DEMO, "--mode", "oom"] + (
            ["--recompute"] if name.endswith("recompute") else []
        ), {"MALLOC_MMAP_THRESHOLD_": "1048576"}
    if name in (
        "stale_kernel_lock",
        "stale_kernel_lock_cleared",
    ):  # in a temporary folder, never ~/.cache
        return [sys.executable, "-m", KERNEL_LOCK_DEMO, "--timeout_s", "3"] + (
            ["--clear"] if name.endswith("cleared") else []
        ), {}
    raise ValueError(f"unknown lab {name!r}: one of {LABS}")


def run_lab(name: str, timeout_s: float = 150.0) -> LabRun:
    """Run one lab to its (expected) failure and diagnose its log. Within ``make test`` a lab runs
    once and the notebook and the tests that show it read the same run
    (:func:`helpers.run.shared.once`); a reader's call always runs it."""
    done = once(f"lab:{name}", lambda: _run(name, timeout_s), timeout_s)
    return LabRun(**done, diagnosis=diagnose(done["log"]))


def _run(name: str, timeout_s: float) -> dict:
    """One run of lab ``name``: its command, exit code (None: killed at ``timeout_s``), seconds
    and merged log."""
    holder = None
    port = None
    if name == "port_in_use":  # another program already listens on the port
        holder = socket.socket()
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
    cmd, extra = lab_command(name, port)
    # the labs reproduce CPU (gloo) failures whatever the machine: the launcher forces the CPU
    env = rank_env(
        2, {**QUIET_ENV, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **extra}, force="gloo"
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    start = time.monotonic()
    out = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a long log cannot block the ranks
    proc = subprocess.Popen(
        cmd,
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    seen: dict[int, psutil.Process] = {}
    try:
        while proc.poll() is None and time.monotonic() - start < timeout_s:
            for p in _descendants(proc.pid):
                seen.setdefault(p.pid, p)
            time.sleep(0.2)
        returncode = proc.poll()
    finally:
        tree = list(seen.values()) + _descendants(proc.pid)
        if proc.poll() is None:
            tree.append(psutil.Process(proc.pid))
        _kill_all([p for p in tree if p.is_running()])
        proc.wait(timeout=10)
        out.seek(0)
        log = out.read()
        out.close()
        if holder is not None:
            holder.close()
    seconds = round(time.monotonic() - start, 1)
    return {"name": name, "command": cmd, "returncode": returncode, "seconds": seconds, "log": log}
