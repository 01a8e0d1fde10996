"""Read a failed run's log and name the cause and the fix (Chapter 8's troubleshooting table).

:func:`diagnose` matches the messages PyTorch 2.x, gloo, NCCL and torchrun print for each failure
the chapter provokes (``helpers.train.labs``), most specific first: a crash makes its partners
time out too, so the rank that died of a signal is named before any timeout is blamed. The
messages were taken from the labs' own logs (gloo on CPU) and from torch's sources for NCCL
(``ProcessGroupNCCL.cpp``'s watchdog) and the CUDA caching allocator. A stale kernel-build lock
prints nothing of its own: it is recognised by Colossal-AI's "[extension] Compiling the JIT ..."
line with no "Time taken" after it (colossalai/kernel/extensions/cuda_extension.py:85, 102; Chapter
8, "A stale kernel-build lock", :mod:`helpers.run.kernels`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from helpers.run.kernels import CLEAR_COMMAND, unfinished_builds


@dataclass(frozen=True)
class Diagnosis:
    kind: str  # init_hang, port_in_use, out_of_memory, nan_loss, rank_crash, stale_kernel_lock,
    # collective_mismatch, unknown
    cause: str
    fix: str
    evidence: str  # the log line that decided it

    def __str__(self) -> str:
        return f"{self.kind}: {self.cause}\n  fix: {self.fix}\n  evidence: {self.evidence}"


_SIGNALS = {"9": "SIGKILL", "6": "SIGABRT", "11": "SIGSEGV", "7": "SIGBUS"}
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
        "collective_mismatch",
        r"Timed out waiting \d+ms for (recv|send)|Watchdog caught collective operation "
        r"timeout|Detected mismatch between collectives|collective operation timeout",
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


def diagnose(log: str) -> Diagnosis:
    """The first failure of :data:`_RULES` found in ``log`` (the merged output of all ranks)."""
    for kind, pattern, cause, fix in _RULES:
        m = re.search(pattern, log)
        if not m:
            continue
        line = next((ln.strip() for ln in log.splitlines() if re.search(pattern, ln)), m.group(0))
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
