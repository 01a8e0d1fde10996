"""torch's kernel-build lock: every ``lock`` file under a build folder, what holds it, and
clearing the ones a killed build left behind.

Chapter 8, section "A stale kernel-build lock", and Chapter 10's pitfall "A killed kernel build
hangs every later run"; :mod:`helpers.run.kernels` builds the kernels the lock guards. Read in
torch 2.13.0: ``_jit_compile`` (torch/utils/cpp_extension.py:2302) guards the build with
``FileBaton(<build_directory>/lock)`` (line 2345): the first process creates the file with
``O_CREAT | O_EXCL`` and keeps the descriptor open (torch/utils/file_baton.py:34) while ninja
builds in that folder (cpp_extension.py:2898, ``cwd=build_directory``); ``release()`` closes and
deletes it (file_baton.py:58-63, called at cpp_extension.py:2398). Every other process calls
``baton.wait()`` (cpp_extension.py:2400), which sleeps while the file exists (file_baton.py:49),
with no message and no time limit. A build killed midway — a launch timeout's SIGKILL — leaves
the file behind, and every later run waits on it forever, silently.

A live holder has the lock open, or runs in its folder (ninja and the compilers torch starts): a
lock with neither is stale and safe to delete. Not visible from here: a holder on another host
that shares this home directory (NFS) or in another PID namespace. Imports neither torch nor
Colossal-AI.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil


def extension_root() -> Path:
    """``~/.cache/colossalai/torch_extensions``, expanded as base_extension.py:55-57 does."""
    return Path(os.path.join(os.path.expanduser("~"), ".cache/colossalai/torch_extensions"))


@dataclass(frozen=True)
class Lock:
    """One ``lock`` file and what holds it (``holder`` None: no live process — stale)."""

    path: Path
    age_s: float  # since it was created (FileBaton never writes it)
    inode: int
    holder: int | None = None
    how: str = ""  # "has it open", or "runs in its folder (ninja)"

    @property
    def stale(self) -> bool:
        return self.holder is None

    def __str__(self) -> str:
        who = f"held by pid {self.holder} ({self.how})" if self.holder else "stale: no live holder"
        return f"{self.path}  {who}, age {self.age_s:.0f} s"


def _holders(paths: set[Path]) -> dict[Path, tuple[int, str]]:
    """For each lock path: a live process that has it open, else one whose cwd is its folder."""
    folders = {p.parent: p for p in paths}
    found: dict[Path, tuple[int, str]] = {}
    for proc in psutil.process_iter(["pid", "name"]):
        try:
            for f in proc.open_files():
                path = Path(f.path)
                if path in paths:
                    found[path] = (proc.pid, "has it open")  # an open descriptor decides
            cwd = Path(proc.cwd())
            if cwd in folders and folders[cwd] not in found:
                found[folders[cwd]] = (proc.pid, f"runs in its folder ({proc.info['name']})")
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue  # gone, a zombie (its descriptors are closed), or another user's
    return found


def locks(root: str | Path | None = None) -> list[Lock]:
    """Every file named ``lock`` under ``root`` (default :func:`extension_root`), with its
    holder."""
    root = Path(root) if root is not None else extension_root()
    if not root.is_dir():
        return []
    files = sorted(p.resolve() for p in root.rglob("lock") if p.is_file())
    holders = _holders(set(files)) if files else {}
    now, out = time.time(), []
    for path in files:
        try:
            st = path.stat()
        except FileNotFoundError:  # released while we looked
            continue
        pid, how = holders.get(path, (None, ""))
        out.append(Lock(path, max(0.0, now - st.st_mtime), st.st_ino, pid, how))
    return out


def clear_stale(
    verbose: bool = True, root: str | Path | None = None, grace_s: float = 0.5
) -> list[Path]:
    """Delete the lock files no live process holds; keep held ones. Returns the paths removed.

    ``FileBaton.release`` closes the file before it deletes it (file_baton.py:60-63): a lock seen
    unheld in that instant is not stale, so a lock is deleted only if it is still there, the same
    file and still unheld ``grace_s`` later.
    """
    first = {lock.path: lock.inode for lock in locks(root) if lock.stale}
    if first and grace_s:
        time.sleep(grace_s)
    removed = []
    for lock in locks(root):
        if not lock.stale:
            if verbose:
                print(
                    f"kept {lock.path}: held by pid {lock.holder} ({lock.how}); "
                    f"a build is running, let it finish",
                    flush=True,
                )
            continue
        if first.get(lock.path) != lock.inode:  # new since the first look
            continue
        lock.path.unlink(missing_ok=True)
        removed.append(lock.path)
        if verbose:
            print(
                f"removed stale lock {lock.path}: no live process has it open or runs in "
                f"{lock.path.parent.name} (a build killed midway left it, {lock.age_s:.0f} s ago)",
                flush=True,
            )
    return removed
