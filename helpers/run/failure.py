"""Which rank of a failed launch failed first, of its own accord.

Used by :mod:`helpers.run.launch` to show the failing rank's own traceback, not torchrun's
summary or a partner's knock-on error (Chapter 1, "Where the ranks run"; Chapter 8's failure
labs read the same logs).
"""

from __future__ import annotations

import re
import signal

LAUNCHER = -1  # pseudo-rank for torchrun's own lines
_ROOT_CAUSE_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_EXITCODE = re.compile(r"^\s*exitcode\s*:\s*-(\d+)")

# Errors a rank raises because *another* rank died: never the root cause.
_KNOCK_ON = (
    "Connection closed by peer",
    "remote worker",
    "Connection reset by peer",
    "Broken pipe",
    "NCCL communicator was aborted",
    "ProcessGroupNCCL is aborted",
)


def failing_rank(lines: dict[int, list[str]]) -> int | None:
    """The rank that failed first of its own accord.

    A crash on one rank makes its partners fail too (gloo: "Connection closed by peer"), and on a
    busy machine torchrun may see a partner exit first; so a rank whose traceback ends in such a
    knock-on error is only chosen when no rank failed for a reason of its own.
    """
    with_traceback = [
        r
        for r in sorted(k for k in lines if k != LAUNCHER)
        if any("Traceback" in line for line in lines[r])
    ]
    own = [r for r in with_traceback if not any(s in "\n".join(lines[r][-5:]) for s in _KNOCK_ON)]
    if own:
        return own[0]
    launcher = lines.get(LAUNCHER, [])
    killed = _killed_by_signal(launcher)
    if killed:  # e.g. SIGKILL (OOM killer, a lost node): no traceback; torchrun may miss it
        return killed[0]
    for i, line in enumerate(launcher):
        if "Root Cause" in line:
            for later in launcher[i:]:
                m = _ROOT_CAUSE_RANK.match(later)
                if m:
                    return int(m.group(1))
    return with_traceback[0] if with_traceback else None


def _killed_by_signal(launcher: list[str]) -> list[int]:
    """Ranks torchrun's failure summary lists as ended by a signal other than its own SIGTERM.

    torchrun stamps failures to the second and breaks ties by rank, so a partner that exits on its
    own knock-on error in the same second can be named "Root Cause" instead of the rank that was
    killed; a rank that died of a signal torchrun did not send is the cause.
    """
    ranks, rank = [], None
    for line in launcher:
        m = _ROOT_CAUSE_RANK.match(line)
        if m:
            rank = int(m.group(1))
            continue
        m = _EXITCODE.match(line)
        if m and rank is not None and int(m.group(1)) != signal.SIGTERM and rank not in ranks:
            ranks.append(rank)
    return ranks
