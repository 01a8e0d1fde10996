"""Read a failed run's log and name the cause and the fix (Chapter 8's troubleshooting table).

:func:`diagnose` matches the messages PyTorch 2.x, gloo, NCCL and torchrun print for each failure
the chapter provokes (``helpers.train.labs``), most specific first: a crash makes its partners
time out too, so the rank that died of a signal is named before any timeout is blamed. The
messages were taken from the labs' own logs (gloo on CPU) and from torch's sources for NCCL
(``ProcessGroupNCCL.cpp``'s watchdog) and the CUDA caching allocator. A stale kernel-build lock
prints nothing of its own: it is recognised by Colossal-AI's "[extension] Compiling the JIT ..."
line with no "Time taken" after it (colossalai/kernel/extensions/cuda_extension.py:85, 102; Chapter
8, "A stale kernel-build lock", :mod:`helpers.run.kernels`).

Across hosts (Chapter 8, "A lost node" and "A link goes down"; :mod:`helpers.cluster.node_faults`)
two more: a peer whose connection closed is on another host (gloo prints the peer's address, and
``hosts``, the job's address-to-name table, turns it into the host's name), and a collective that
timed out in a job over several hosts, or on a host whose agent lost the rendezvous store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from helpers.run.kernels import CLEAR_COMMAND, unfinished_builds


@dataclass(frozen=True)
class Diagnosis:
    kind: str  # init_hang, port_in_use, out_of_memory, nan_loss, rank_crash, lost_node,
    # stale_kernel_lock, cross_node_timeout, collective_mismatch, unknown
    cause: str
    fix: str
    evidence: str  # the log line that decided it

    def __str__(self) -> str:
        return f"{self.kind}: {self.cause}\n  fix: {self.fix}\n  evidence: {self.evidence}"


_SIGNALS = {"9": "SIGKILL", "6": "SIGABRT", "11": "SIGSEGV", "7": "SIGBUS"}
_TIMEOUT = (
    r"Timed out waiting \d+ms for (recv|send)|Watchdog caught collective operation timeout|"
    r"collective operation timeout"
)
# a host's agent that cannot reach the rendezvous store on another host (torch's TCPStore client)
_STORE_LOST = r"recvValue failed|sendBytes failed|The connection to the C10d store has failed"
_RULES = [  # (kind, pattern, cause, fix); the first pattern found in the log wins
    (
        "port_in_use",
        r"EADDRINUSE|address already in use",
        "MASTER_PORT is taken by another process (often a previous run still alive)",
        "pick a free port (--master_port, or torchrun --standalone), or end the old run by its pid",
    ),
    (
        "init_hang",
        r"waiting for clients\. (\d+)/(\d+) clients joined|RendezvousTimeoutError|"
        r"Timed out after \d+ seconds waiting for clients",
        "fewer processes joined than WORLD_SIZE says: the process groups expected do not match the "
        "processes "
        "started",
        "check WORLD_SIZE, RANK (unique, 0..WORLD_SIZE-1), MASTER_ADDR and MASTER_PORT on every "
        "node, and "
        "--nnodes/--nproc_per_node; start every node",
    ),
    (
        "out_of_memory",
        r"CUDA out of memory|OutOfMemoryError|DefaultCPUAllocator: can't allocate memory|"
        r"\bMemoryError\b",
        "model states plus activations exceed the memory of one device (or the process's cap)",
        "estimate with the memory model (Chapter 7); then ZeRO / sharding for model states, "
        "recomputation "
        "(gradient checkpointing) or a smaller micro-batch for activations, offload as a last "
        "resort",
    ),
    (
        "nan_loss",
        r"loss is (nan|inf|-inf)|non-finite loss|Loss is NaN",
        "the loss became non-finite: the run diverged (learning rate too high, no clipping, fp16 "
        "overflow) or "
        "a batch holds bad values",
        "lower the learning rate or add warm-up, clip gradients (max_norm), prefer bf16 over fp16 "
        "(or a loss "
        "scaler), check the data of that step; resume from the last finite checkpoint",
    ),
    (
        "rank_crash",
        r"exitcode\s*:\s*-(9|6|11|7)\b|Signal (9|6|11|7) \(SIG\w+\) received",
        "a rank was killed by a signal (a lost node, the host's OOM killer, a segfault); its "
        "partners then "
        "fail with 'Connection closed by peer' or a timeout",
        "read the dead rank's own log and the host's (dmesg for the OOM killer); replace the node; "
        "resume "
        "from the last checkpoint",
    ),
    (
        "lost_node",
        r"(?:Connection closed by peer|Connection reset by peer|Read error|Write error) "
        r"\[([0-9a-fA-F.:]+)\]",
        "the ranks of another host vanished mid-run (the node died, rebooted or was "
        "preempted): every connection to it closed at once, and the ranks here failed with it",
        "check that host (is it up? its own log, dmesg, the scheduler's node state); replace "
        "or drain it, then resume from the last checkpoint; torchrun --max_restarts N restarts "
        "the job by itself when the node comes back",
    ),
    (
        "stale_kernel_lock",
        r"\[extension\] Compiling the JIT \S+ kernel",
        "a run was killed while building Colossal-AI's JIT kernels (or waiting for that build), or "
        "waits on "
        "the build lock such a run left: torch's FileBaton lock in "
        "~/.cache/colossalai/torch_extensions has "
        "no live holder, and every Colossal-AI run on the machine waits on it forever, silently",
        f"{CLEAR_COMMAND} (it deletes only locks no live process holds), then make kernels once "
        "per machine "
        "(about a minute) before timed runs, or give the first run a timeout above the build",
    ),
    (
        "cross_node_timeout",
        _TIMEOUT,
        "a collective between hosts timed out: the ranks here waited for ranks on another host "
        "that stopped answering while every process stayed alive, as a link that is down does "
        "(cable, switch port, NIC, firewall), or a rank there that hangs",
        "check the link first: from each host reach the others' addresses on the interface the "
        "backend uses (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME; ping, nc, ip link), then the "
        "switch; a hung rank there shows in py-spy dump; then resume from the last checkpoint",
    ),
    (
        "collective_mismatch",
        _TIMEOUT + r"|Detected mismatch between collectives",
        "ranks did not call the same collectives in the same order (one skipped or added one), or "
        "a rank "
        "stalled: the partners wait until the timeout",
        "make every rank run the same collectives (no rank-dependent `continue` around an "
        "all-reduce); "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL checks the sequence; on NCCL set "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING and "
        "read the watchdog's SeqNum/OpType; shrink the layout to find a faulty node",
    ),
]


def _rank_of_signal(log: str) -> str | None:
    """The rank torchrun's summary reports as ended by a signal other than its own SIGTERM."""
    rank = None
    for line in log.splitlines():
        m = re.match(r"\s*rank\s*:\s*(\d+)", line)
        if m:
            rank = m.group(1)
        m = re.match(r"\s*exitcode\s*:\s*-(\d+)", line)
        if m and m.group(1) in _SIGNALS and rank is not None:
            return f"rank {rank} ({_SIGNALS[m.group(1)]})"
    return None


def _own_host(log: str) -> str | None:
    """The host this log comes from: torchrun's failure summary names it (``host : host0``)."""
    m = re.search(r"^\s*host\s*:\s*(\S+)", log, re.MULTILINE)
    return m.group(1) if m else None


def _remote_peer(log: str, pattern: str, hosts: dict[str, str]) -> tuple[str, str] | None:
    """The first closed connection to a peer on another host: (its address, the log line)."""
    own = _own_host(log)
    for line in log.splitlines():
        m = re.search(pattern, line)
        if not m:
            continue
        address = m.group(1)
        if address.startswith("127.") or address == "::1" or hosts.get(address, "?") == own:
            continue
        return address, line.strip()
    return None


def _across_hosts(log: str, hosts: dict[str, str]) -> bool:
    """The job spans several hosts (the caller says so) or this host lost the store."""
    return len(set(hosts.values())) > 1 or re.search(_STORE_LOST, log) is not None


# [start: diagnose]
def diagnose(log: str, hosts: dict[str, str] | None = None) -> Diagnosis:
    """The first failure of :data:`_RULES` found in ``log`` (the merged output of all ranks, or
    one host's). ``hosts``: the job's hosts, address to name (a hostfile, ``/etc/hosts``), for a
    job over several hosts; it names a lost node and marks a collective timeout as cross-node."""
    hosts = dict(hosts or {})
    for kind, pattern, cause, fix in _RULES:
        m = re.search(pattern, log)
        if not m:
            continue
        line = next((ln.strip() for ln in log.splitlines() if re.search(pattern, ln)), m.group(0))
        if kind == "lost_node":
            peer = _remote_peer(log, pattern, hosts)
            if peer is None:
                continue  # a peer on this host: its own failure is the cause (rank_crash, ...)
            address, line = peer
            name = hosts.get(address)
            who = f"{name} ({address})" if name else f"the host at {address}"
            cause = f"lost node {who}: " + cause
        if kind == "cross_node_timeout":
            if not _across_hosts(log, hosts):
                continue
            own = _own_host(log)
            others = sorted(set(hosts.values()) - {own}) if own else []
            if re.search(_STORE_LOST, log):
                cause += "; this host's agent also lost the rendezvous store on another host"
            if own and others:
                cause = f"on {own}, waiting for {' or '.join(others)}: " + cause
        if kind == "stale_kernel_lock":  # the run that never finished comes last
            line = [ln.strip() for ln in log.splitlines() if re.search(pattern, ln)][-1]
        if kind == "stale_kernel_lock" and (
            not unfinished_builds(log) or "Error building extension" in log
        ):
            continue  # every build finished, or the build failed with an error of its own
        if kind == "rank_crash":
            who = _rank_of_signal(log)
            cause = f"{who} ended first: " + cause if who else cause
        if kind == "nan_loss":
            step = re.search(r"at step (\d+)", line)
            cause += f" (first at step {step.group(1)})" if step else ""
        return Diagnosis(kind, cause, fix, line[:300])
    if "Traceback" not in log and "Error" not in log:
        return Diagnosis("none", "no failure in the log", "", "")
    last = next((ln.strip() for ln in reversed(log.splitlines()) if "Error" in ln), "")
    return Diagnosis(
        "unknown", "no known failure pattern", "read the first rank's own traceback", last[:300]
    )


# [end: diagnose]
