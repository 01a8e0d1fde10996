"""One job over several hosts: a torchrun agent per host, c10d rendezvous on host 0.

Chapter 5, "Launching with torchrun". The hosts are :class:`helpers.cluster.hosts.Hosts` (network
namespaces, or agents on loopback where those cannot be made); each runs
:func:`node_command`, the line a reader types on each node of a real cluster.
The ranks' environment is the launcher's placement rule for the whole world (Chapter 1, "Where the
ranks run"), and inside namespaces gloo is pointed at each host's one interface.
:func:`launch_nodes` returns the RESULT lines of every rank, like
:func:`helpers.run.launch.launch`, and each host's own output.
"""

from __future__ import annotations

import os
import shlex
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from helpers.run.env import results_of
from helpers.cluster.hosts import Hosts
from helpers.run.launch import REPO_ROOT, LaunchError, LaunchTimeout, demo_module, rank_env


@dataclass
class NodesResult:
    """A finished job: its hosts, seconds, every rank's results (by rank) and each host's
    output."""

    demo: str
    hosts: list[str]
    nproc_per_node: int
    seconds: float
    results: list[dict]
    outputs: list[str]

    def first(self, rank: int = 0) -> dict:
        """The first result of ``rank``."""
        found = [r for r in self.results if r["rank"] == rank]
        if not found:
            raise KeyError(f"rank {rank} emitted no RESULT")
        return found[0]


def node_command(
    hosts: Hosts,
    k: int,
    demo: str,
    nproc_per_node: int,
    args: list[str] = (),
    port: int = 29400,
    agent_args: list[str] = (),
) -> list[str]:
    """The torchrun agent of host ``k`` for a job over every host: ``--nnodes N --node_rank k``,
    c10d rendezvous on host 0 (Chapter 5, "Launching with torchrun": the same line on a real
    cluster). ``agent_args``: more torchrun options (``--max_restarts 1``, ``--rdzv_conf ...``)."""
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(hosts.n), "--node_rank", str(k), "--nproc_per_node", str(nproc_per_node),
        "--rdzv_backend", "c10d", "--rdzv_endpoint", f"{hosts.hosts[0].address}:{port}",
        "--rdzv_id", f"book-{os.getpid()}", *map(str, agent_args),
        "-m", demo_module(demo), *map(str, args),
    ]  # fmt: skip


def job_env(hosts: Hosts, nproc_per_node: int, env: dict[str, str] | None = None) -> dict:
    """Every agent's environment: the placement rule's for the whole world, the repository on
    ``PYTHONPATH``, gloo on ``eth0`` inside namespaces, then ``env``."""
    extra = {"PYTHONPATH": str(REPO_ROOT), **(env or {})}
    if hosts.mode == "namespaces":
        extra.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    return rank_env(hosts.n * nproc_per_node, extra)


def default_port() -> int:
    """The rendezvous port: two test processes' loopback agents differ."""
    return 29400 + os.getpid() % 500


class Node:
    """One agent started by :func:`start_node`, its output read live: ``lines`` grows as the
    agent prints, each with the monotonic time it arrived in ``times``."""

    def __init__(self, k: int, proc: subprocess.Popen, command: list[str]):
        self.k, self.proc, self.command = k, proc, command
        self.lines: list[str] = []
        self.times: list[float] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.times.append(time.monotonic())
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout_s: float, after: int = 0) -> int:
        """The index of the first line from ``after`` on that matches ``pattern`` (a regular
        expression); :class:`TimeoutError` when none arrives within ``timeout_s`` or the agent
        ends first."""
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            for i in range(after, len(self.lines)):
                if re.search(pattern, self.lines[i]):
                    return i
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.05)
        tail = "\n".join(self.lines[-15:])
        raise TimeoutError(f"host{self.k}'s agent printed no line matching {pattern!r}:\n{tail}")

    def wait(self, timeout_s: float) -> int:
        """The agent's exit status, once it has ended and all its output is read."""
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=5)
        return code

    @property
    def output(self) -> str:
        return "\n".join(self.lines)


def start_node(
    hosts: Hosts,
    k: int,
    demo: str,
    nproc_per_node: int = 2,
    args: list[str] | tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    port: int | None = None,
    agent_args: list[str] | tuple[str, ...] = (),
) -> Node:
    """Start host ``k``'s agent and return at once (:func:`launch_nodes` waits for all): for a
    fault that strikes while the job runs, or a host that comes back and starts its agent again
    (Chapter 8, "A lost node"; Chapter 5, "Elastic restarts")."""
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be at least 1, got {nproc_per_node}")
    command = node_command(hosts, k, demo, nproc_per_node, list(args), port or default_port(),
                           list(agent_args))  # fmt: skip
    proc = hosts.popen(k, command, env=job_env(hosts, nproc_per_node, env),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       start_new_session=True)  # fmt: skip
    return Node(k, proc, command)


def reader_line(cmd: list[str], job_id: str | None = None) -> str:
    """An agent's command as a reader types it on a node: ``torchrun ...`` for ``python -m
    torch.distributed.run ...``; ``job_id`` stands for the run's own rendezvous id."""
    words = ["torchrun", *map(str, cmd[cmd.index("torch.distributed.run") + 1 :])]
    if job_id is not None and "--rdzv_id" in words:
        words[words.index("--rdzv_id") + 1] = job_id
    return shlex.join(words)


def launch_nodes(
    demo: str,
    hosts: Hosts,
    nproc_per_node: int = 2,
    args: list[str] | tuple[str, ...] = (),
    timeout_s: float = 180.0,
    env: dict[str, str] | None = None,
    port: int | None = None,
) -> NodesResult:
    """Run ``helpers.demos.<demo>`` on every host at once, ``nproc_per_node`` ranks each; raise
    :class:`helpers.run.launch.LaunchError` (rank None, ``lines`` keyed by host) when an agent
    fails, :class:`helpers.run.launch.LaunchTimeout` past ``timeout_s`` (every agent killed)."""
    if nproc_per_node < 1:
        raise ValueError(f"nproc_per_node must be at least 1, got {nproc_per_node}")
    ranks_env = job_env(hosts, nproc_per_node, env)
    port = port or default_port()
    start = time.monotonic()
    procs = [
        hosts.popen(
            k,
            node_command(hosts, k, demo, nproc_per_node, list(args), port),
            env=ranks_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for k in range(hosts.n)
    ]
    outputs: list[str] = []
    try:
        for p in procs:
            left = max(1.0, timeout_s - (time.monotonic() - start))
            outputs.append(p.communicate(timeout=left)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            _kill_group(p)
        lines = {k: (p.communicate()[0] or "").splitlines() for k, p in enumerate(procs)}
        raise LaunchTimeout(
            f"{demo} across {hosts.n} hosts ran past {timeout_s:g} s: every agent killed",
            None,
            lines,
            None,
        ) from None
    seconds = time.monotonic() - start
    bad = [k for k, p in enumerate(procs) if p.returncode != 0]
    if bad:
        lines = {k: out.splitlines() for k, out in enumerate(outputs)}
        tail = "\n".join(lines[bad[0]][-30:])
        raise LaunchError(
            f"{demo}: the agent on {hosts.hosts[bad[0]].name} exited with "
            f"{procs[bad[0]].returncode}. Its output ends:\n{tail}",
            None,
            lines,
            procs[bad[0]].returncode,
        )
    results = sorted(
        (r for out in outputs for r in results_of(out.splitlines())), key=lambda r: r["rank"]
    )
    names = [h.name for h in hosts.hosts]
    return NodesResult(demo, names, nproc_per_node, seconds, results, outputs)


def shaped_run(
    demo: str, rate: str, args=(), timeout_s: float = 150.0, nproc_per_node: int = 2
) -> dict:
    """Two hosts whose link is shaped to ``rate`` (``Hosts.shape``: a ``tc`` token bucket both
    ways), ``demo`` run once across them with ``nproc_per_node`` ranks each and one OpenMP thread
    per rank: the job's ``results``, the hosts' ``banner``, host 0's ``tc`` line and the
    ``seconds`` it took. Needs network namespaces (root)."""
    with Hosts(2) as hosts:
        for k in range(hosts.n):
            hosts.shape(k, rate)
        tc = subprocess.run(["tc", "-n", hosts.hosts[0].netns, "qdisc", "show", "dev", "eth0"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
        job = launch_nodes(demo, hosts, nproc_per_node, list(args), timeout_s=timeout_s,
                           env={"OMP_NUM_THREADS": "1"})  # fmt: skip
        banner = hosts.banner()
    return {"results": job.results, "banner": banner, "tc": tc, "seconds": job.seconds}


def shaped_measure(demo: str, summarise, rate: str, args=(), timeout_s: float = 150.0) -> dict:
    """:func:`shaped_run` of ``demo`` and ``summarise(results, rate)``'s dict, with the hosts'
    banner, the ``tc`` line of host 0 and the seconds the job took. Needs namespaces."""
    run = shaped_run(demo, rate, args, timeout_s)
    return {
        **summarise(run["results"], rate),
        "hosts_banner": run["banner"],
        "tc": run["tc"],
        "seconds": run["seconds"],
    }


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


# --- Chapter 5's run of Chapter 2's 3-D layout across two hosts --------------------------------
def torchrun_3d() -> dict:
    """Chapter 2's dp × pp × tp = 2 × 2 × 2 from scratch on two hosts of four ranks each, one
    torchrun agent per host (:func:`launch_nodes`): where each rank ran,
    its groups, and its losses and gradients against the unsplit model."""
    with Hosts(2) as hosts:
        job = launch_nodes("ch02_3d", hosts, 4, ["--pp", "2", "--tp", "2"], timeout_s=300)
        lines = [node_command(hosts, k, "ch02_3d", 4, ["--pp", "2", "--tp", "2"]) for k in (0, 1)]
        banner = hosts.banner()
    host_of = {r["rank"]: job.hosts[k] for k, out in enumerate(job.outputs)
               for r in results_of(out.splitlines())}  # fmt: skip
    return {
        "hosts_banner": banner,
        "commands": [reader_line(c, "job1") for c in lines],
        "seconds": job.seconds,
        "ranks": [
            {
                "rank": r["rank"],
                "host": host_of[r["rank"]],
                "groups": r["groups"],
                "losses_equal_reference": r["losses"] == r["ref_losses"],
                "max_grad_diff": r["max_grad_diff"],
            }
            for r in job.results
        ],
    }
