"""Directories and files that appear whole or not at all, written by every rank at once.

Used by Chapter 5's checkpoints (:mod:`helpers.train.checkpoint`). Every rank writes into
``.tmp-<name>/``; after a barrier rank 0 renames the folder to its final name. ``rename`` is
atomic on a POSIX file system, so a directory with the final name is always complete: a rank
killed mid-write leaves only a ``.tmp-*`` folder, which the next write of that name replaces.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path
from typing import Iterator

import torch.distributed as dist

TMP_PREFIX = ".tmp-"


def barrier() -> None:
    """A barrier over the default group, when there is one (a single process needs none)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def this_rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (the rename itself) to disk; a no-op where directories can't be
    opened."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_dir(final: str | os.PathLike) -> Iterator[Path]:
    """Write a directory on every rank, then publish it under ``final`` in one rename.

    Rank 0 clears a stale ``.tmp-<name>`` (left by an earlier kill) and creates it; after a barrier
    every rank writes its files into it. On leaving the block: barrier (every rank has finished
    writing), rank 0 renames, barrier (no rank goes on before the checkpoint exists). If the block
    raises, nothing is renamed. Works without a process group too (one process).
    """
    # [start: atomic-dir]
    final = Path(final)
    tmp = final.with_name(TMP_PREFIX + final.name)
    if this_rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    yield tmp
    barrier()
    if this_rank() == 0:
        if final.exists():  # same step saved again (e.g. a resumed run): replace it whole
            old = final.with_name(TMP_PREFIX + "old-" + final.name)
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        fsync_dir(final.parent)
    barrier()
    # [end: atomic-dir]


def write_json_atomic(path: Path, data: dict) -> None:
    """Write JSON through a temporary file and ``os.replace`` (readers never see half a file)."""
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
