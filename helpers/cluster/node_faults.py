"""Node faults across hosts, run for real on two namespace hosts: a host that dies, a link that goes
down, and an elastic restart that brings the dead host back (Chapter 8, "A lost node" and "A link
goes down"; Chapter 5, "Elastic restarts").

Each scenario starts ``helpers.demos.ch08_nodes`` (a tiny data-parallel job that checkpoints and
resumes) on :class:`helpers.cluster.hosts.Hosts` ``(2)``, a torchrun agent per host with 2 gloo
ranks each and the c10d rendezvous on host 0 (:func:`helpers.cluster.multinode.start_node`), strikes
mid-run, and returns a JSON-able dict of what happened: the commands, the seconds until every
process on every host had ended, the processes left (none), the key lines of each host's log and
what :func:`helpers.train.diagnose.diagnose` makes of the log a reader has. Timings are raw; a
notebook masks them. Every scenario needs the hosts in namespaces and raises RuntimeError without.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers.run.env import results_of
from helpers.cluster.hosts import Hosts
from helpers.run.launch import REPO_ROOT, rank_env
from helpers.cluster.multinode import Node, default_port, reader_line, start_node
from helpers.train.diagnose import diagnose

DEMO = "ch08_nodes"
NPROC = 2  # ranks per host
# unbuffered lines (the scenarios act on them as they come), one thread a rank (2 cores for 4)
ENV = {"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
# what a rank's gloo call raises when the host of its partner vanishes: the partner's socket
# closed or reset (which of the two depends on where the kill finds the partner), or its timeout
PARTNER_GONE = r"Connection (?:closed|reset) by peer|Timed out waiting"
# lines worth showing a reader: the ranks' errors, the agents' failures, restarts, rendezvous
KEY = re.compile(
    r"Error:|Connection (closed|reset)|Timed out|exitcode|Root Cause|host  +:|"
    r"restart worker group|Rendezvous complete|resumed from|failed \(exitcode|"
    r"RendezvousConnectionError|RendezvousTimeoutError|recvValue failed|sendBytes failed"
)


def key_lines(log: str, limit: int = 14) -> list[str]:
    """The lines of ``log`` that tell the story, each once, shortened to 160 characters."""
    seen: list[str] = []
    for line in log.splitlines():
        short = re.sub(r"\S*/(site-packages|pytorch/pytorch)/", "", line.strip())[:160]
        if KEY.search(line) and short not in seen:
            seen.append(short)
    return seen[:limit]


def _names(hosts: Hosts) -> dict[str, str]:
    return {h.address: h.name for h in hosts.hosts}


def _wait_empty(hosts: Hosts, ks: list[int], start: float, bound_s: float) -> float | None:
    """Seconds from ``start`` until no process runs on hosts ``ks``; None past ``bound_s``."""
    while time.monotonic() - start < bound_s:
        if not any(hosts.processes(k) for k in ks):
            return round(time.monotonic() - start, 2)
        time.sleep(0.05)
    return None


def _listening(hosts: Hosts, port: int, timeout_s: float = 60) -> None:
    """Wait until host 0's agent listens on the rendezvous port: host 1's agent then connects at
    once instead of backing off from a refused connection."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        out = subprocess.run(["ss", "-N", hosts.hosts[0].netns, "-Hltn", f"sport = :{port}"],
                             capture_output=True, text=True).stdout  # fmt: skip
        if out.strip():
            return
        time.sleep(0.1)


def _start(hosts: Hosts, args: list[str], agent_args: list[str] = (), env: dict = None):
    if hosts.mode != "namespaces":
        raise RuntimeError(f"node faults need the hosts in namespaces ({hosts.why_loopback})")
    port = default_port()
    kw = dict(args=args, env={**ENV, **(env or {})}, port=port, agent_args=list(agent_args))
    first = start_node(hosts, 0, DEMO, NPROC, **kw)
    _listening(hosts, port)
    return [first, start_node(hosts, 1, DEMO, NPROC, **kw)], kw


def _diagnosis(log: str, hosts: Hosts) -> dict:
    d = diagnose(log, hosts=_names(hosts))
    return {"kind": d.kind, "cause": d.cause, "fix": d.fix, "evidence": d.evidence}


def _head(hosts: Hosts, nodes: list[Node], at_step: int) -> dict:
    """What every fault's record starts with: the hosts, the reader's torchrun lines, the step
    after which the fault struck."""
    return {
        "banner": hosts.banner(),
        "commands": [reader_line(n.command) for n in nodes],
        "at_step": at_step,
    }


def _finish(nodes: list[Node]) -> list[int | None]:
    codes = []
    for n in nodes:
        try:
            codes.append(n.wait(10))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


def lost_node(steps: int = 60, at_step: int = 4, timeout_s: float = 5.0, bound_s: float = 30.0):
    """Host 1 dies mid-run (every process SIGKILLed at once, after step ``at_step``): how long
    until every rank on every host has ended, and what the surviving host's log says."""
    args = ["--steps", steps, "--step_s", 0.2, "--timeout_s", timeout_s]
    with Hosts(2) as hosts:
        nodes, _ = _start(hosts, args)
        nodes[0].wait_for(rf"^step {at_step} done", 120)
        struck = time.monotonic()
        killed = hosts.kill(1)
        seconds = _wait_empty(hosts, [0, 1], struck, bound_s)
        codes = _finish(nodes)
        left = [hosts.processes(k) for k in range(2)]
        log = nodes[0].output  # the dead host printed nothing more: host 0's log is the evidence
        return {
            **_head(hosts, nodes, at_step),
            "killed_processes": killed,
            "seconds_to_end": seconds,
            "bound_s": bound_s,
            "exit_codes": codes,
            "left": left,
            "survivor_lines": key_lines(log),
            "diagnosis": _diagnosis(log, hosts),
        }


def link_down(steps: int = 60, at_step: int = 4, timeout_s: float = 3.0, bound_s: float = 40.0):
    """Host 1's cable is pulled mid-run (its switch port down; every process stays alive): the
    collectives time out after ``timeout_s`` on both sides. Host 0's agent then ends; host 1's
    stays blocked on the rendezvous store across the dead link until the cable is plugged back,
    and then ends too."""
    args = ["--steps", steps, "--step_s", 0.2, "--timeout_s", timeout_s]
    with Hosts(2) as hosts:
        nodes, _ = _start(hosts, args)
        nodes[0].wait_for(rf"^step {at_step} done", 120)
        struck = time.monotonic()
        hosts.set_link(1, False)
        host0_s = _wait_empty(hosts, [0], struck, bound_s)
        stranded = [_cmdline(p) for p in hosts.processes(1)]
        hosts.set_link(1, True)
        plugged = time.monotonic()
        host1_s = _wait_empty(hosts, [1], plugged, bound_s)
        codes = _finish(nodes)
        logs = [n.output for n in nodes]
        return {
            **_head(hosts, nodes, at_step),
            "timeout_s": timeout_s,
            "host0_seconds_to_end": host0_s,
            "stranded_on_host1": stranded,  # what still ran on host 1 when host 0 had ended
            "host1_seconds_after_replug": host1_s,
            "seconds_to_end": round(plugged - struck + (host1_s or bound_s), 2),
            "bound_s": bound_s,
            "exit_codes": codes,
            "left": [hosts.processes(k) for k in range(2)],
            "lines": [key_lines(log) for log in logs],
            "diagnosis": [_diagnosis(log, hosts) for log in logs],
        }


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return ""
    words = [w.decode() for w in raw if w]
    return reader_line(words) if "torch.distributed.run" in words else shlex.join(words)[:120]


def reference_hash(steps: int, world: int = 2 * NPROC) -> str:
    """The final weights' hash of the run without faults: the demo's one-process reference, in
    the ranks' environment (the caller's: ``ATEN_CPU_CAPABILITY`` picks the same kernels)."""
    done = subprocess.run(
        [sys.executable, "-m", f"helpers.demos.{DEMO}", "--reference", str(world), "--steps",
         str(steps)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
        env=rank_env(world, {"PYTHONPATH": str(REPO_ROOT), **ENV}),
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the reference run failed:\n{done.stderr[-2000:]}")
    return done.stdout.split()[-1]


# torchrun's elastic options: one restart; the agent checks its workers every 0.5 s; the
# rendezvous waits up to 60 s for the hosts, and a host whose agent sent no heartbeat for
# 1 s x 2 is dropped from it (torch's defaults: 5 s x 3)
ELASTIC = ["--max_restarts", "1", "--monitor_interval", "0.5", "--rdzv_conf",
           "join_timeout=60,keep_alive_interval=1,keep_alive_max_attempt=2"]  # fmt: skip
# LOGLEVEL=INFO: the agents say when they restart and re-rendezvous. Without its own TCP store
# per round (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1), a host that comes back waits forever: the
# surviving rank-0 agent reuses its first round's bootstrap info and never writes MASTER_ADDR
# for the new round (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1209-1223), so
# the new agent waits for that key and the survivor for the new agent's role_info.
ELASTIC_ENV = {"LOGLEVEL": "INFO", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def elastic_restart(steps: int = 16, at_step: int = 7, save_every: int = 2,
                    timeout_s: float = 5.0, bound_s: float = 120.0) -> dict:  # fmt: skip
    """Host 1 dies after step ``at_step`` of a job started with ``--max_restarts 1``; once host 0's
    agent has seen its workers fail and is waiting in the rendezvous, host 1 comes back (its agent
    started again, same command, same namespace). The job resumes from the last checkpoint and
    its final weights are compared with the uninterrupted run's (:func:`reference_hash`)."""
    ckpt = tempfile.mkdtemp(prefix="book-elastic-")
    args = ["--steps", steps, "--step_s", 0.2, "--timeout_s", timeout_s, "--ckpt_dir", ckpt,
            "--save_every", save_every]  # fmt: skip
    try:
        with Hosts(2) as hosts:
            nodes, kw = _start(hosts, args, ELASTIC, env=ELASTIC_ENV)
            survivor = nodes[0]
            survivor.wait_for(rf"^step {at_step} done", 120)
            saved = sorted(p.name for p in Path(ckpt).glob("step_*.pt"))
            struck = time.monotonic()
            hosts.kill(1)
            seen = survivor.wait_for(PARTNER_GONE, 60)
            restart = survivor.wait_for(r"will restart worker group", 60, seen)
            survivor.wait_for(r"Rendezvous'ing worker group", 60, restart)
            back = start_node(hosts, 1, DEMO, NPROC, **kw)
            back_s = time.monotonic() - struck
            codes = [n.wait(bound_s) for n in (survivor, back)]
            ended = time.monotonic() - struck
            left = [hosts.processes(k) for k in range(2)]
            lines = survivor.lines + back.lines
            resumed = survivor.wait_for(r"resumed from", 1, restart)
            results = results_of(lines)
            return {
                **_head(hosts, nodes, at_step),
                "host1_back_command": reader_line(back.command),
                "checkpoints_at_kill": saved,
                "workers_failed_s": round(survivor.times[seen] - struck, 2),
                "restart_logged_s": round(survivor.times[restart] - struck, 2),
                "host1_back_s": round(back_s, 2),
                "resumed_s": round(survivor.times[resumed] - struck, 2),
                "seconds_to_end": round(ended, 2),
                "bound_s": bound_s,
                "exit_codes": codes,
                "left": left,
                "result": results[0] if results else None,
                "reference_sha256": reference_hash(steps),
                "survivor_lines": key_lines(survivor.output, 20),
                "host1_back_lines": key_lines(back.output, 10),
            }
    finally:
        import shutil

        shutil.rmtree(ckpt, ignore_errors=True)
