"""One job over several hosts: a torchrun agent per host, c10d rendezvous on host 0.

Chapter 5, "Launching with torchrun". The hosts are :class:`helpers.run.hosts.Hosts` (network
namespaces, or agents on loopback where those cannot be made); each runs
:func:`node_command`, the line a reader types on each node of a real cluster.
The ranks' environment is the launcher's placement rule for the whole world (Chapter 1, "Where the
ranks run"), and inside namespaces gloo is pointed at each host's one interface.
:func:`launch_nodes` returns the RESULT lines of every rank, like
:func:`helpers.run.launch.launch`, and each host's own output.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass

from helpers.run.env import results_of
from helpers.run.hosts import Hosts
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
    hosts: Hosts, k: int, demo: str, nproc_per_node: int, args: list[str] = (), port: int = 29400
) -> list[str]:
    """The torchrun agent of host ``k`` for a job over every host: ``--nnodes N --node_rank k``,
    c10d rendezvous on host 0 (Chapter 5, "Launching with torchrun": the same line on a real
    cluster)."""
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(hosts.n), "--node_rank", str(k), "--nproc_per_node", str(nproc_per_node),
        "--rdzv_backend", "c10d", "--rdzv_endpoint", f"{hosts.hosts[0].address}:{port}",
        "--rdzv_id", f"book-{os.getpid()}", "-m", demo_module(demo), *map(str, args),
    ]  # fmt: skip


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
    extra = {"PYTHONPATH": str(REPO_ROOT), **(env or {})}
    if hosts.mode == "namespaces":
        extra.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    ranks_env = rank_env(hosts.n * nproc_per_node, extra)
    port = port or 29400 + os.getpid() % 500  # two test processes' loopback agents differ
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


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
