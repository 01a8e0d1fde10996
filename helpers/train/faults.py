"""Deliberate failures for the fault-tolerance demos (Chapter 5).

``die`` is what a crashed node looks like to everyone else: the process disappears with SIGKILL,
so no ``finally`` block, no ``atexit`` hook and no Python exception handler runs on that rank.
"""

from __future__ import annotations

import os
import signal
import sys


def die(reason: str) -> None:
    """Print one line saying why, then SIGKILL this process (nothing after this call runs)."""
    sys.stdout.write(f"FAULT {reason}: SIGKILL pid {os.getpid()}\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def maybe_die(step: int, rank: int, kill_at: int | None, kill_rank: int) -> None:
    """Kill ``kill_rank`` when it is about to run step ``kill_at`` (0-based); otherwise do nothing."""
    if kill_at is not None and step == kill_at and rank == kill_rank:
        die(f"rank {rank} killed at step {step}")
