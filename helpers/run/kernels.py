"""Colossal-AI's JIT-built kernels: build them once and visibly, and find a build lock left stale.

Chapter 8, section "A stale kernel-build lock" (failure labs ``stale_kernel_lock`` and
``stale_kernel_lock_cleared``, :mod:`helpers.demos.ch08_kernel_lock`) and Chapter 10's pitfall
"A killed kernel build hangs every later run" (``kernel-lock``). What upstream does, read in
colossalai 0.5.0 and torch 2.13.0 (``.venv/lib/python3.11/site-packages``):

* HybridAdam loads two kernels when it is built: ``CPUAdam.__init__`` calls
  ``CPUAdamLoader().load()`` (colossalai/nn/optimizer/cpu_adam.py:80; ``cpu_adam_x86`` on x86-64)
  and ``HybridAdam.__init__`` ``FusedOptimizerLoader().load()`` (hybrid_adam.py:88;
  ``fused_optim_cuda``). Both are CUDA extensions, usable only with CUDA
  (colossalai/kernel/extensions/cuda_extension.py:26-36; kernel_loader.py:86-99).
* Without a prebuilt ``colossalai._C``, ``_CppExtension.load`` falls back to ``build_jit``
  (extensions/cpp_extension.py:130-138, cuda_extension.py:65-104), which prints
  ``[extension] Compiling the JIT <name> kernel during runtime now`` (line 85) unless ``<name>.so``
  is in the folder of ``_Extension.get_jit_extension_folder_path`` (base_extension.py:28-58:
  ``~/.cache/colossalai/torch_extensions/torch<major>.<minor>_<device>-<version>-<hash>``), and
  calls ``torch.utils.cpp_extension.load`` with that folder as build directory (line 88). Every
  kernel of one machine shares that folder, so they share one lock.
* torch's ``_jit_compile`` (torch/utils/cpp_extension.py:2302) guards the build with
  ``FileBaton(<build_directory>/lock)`` (line 2345): the first process creates the file with
  ``O_CREAT | O_EXCL`` and keeps the descriptor open (torch/utils/file_baton.py:34) while ninja
  builds in that folder (cpp_extension.py:2898, ``cwd=build_directory``); ``release()`` closes and
  deletes it (file_baton.py:58-63, called at cpp_extension.py:2398). Every other process calls
  ``baton.wait()`` (cpp_extension.py:2400), which sleeps while the file exists (file_baton.py:49),
  with no message and no time limit. A build killed midway — a launch timeout's SIGKILL — leaves
  the file behind, and every later run waits on it forever, silently.

A live holder has the lock open, or runs in its folder (ninja and the compilers torch starts): a
lock with neither is stale and safe to delete. Not visible from here: a holder on another host
that shares this home directory (NFS) or in another PID namespace. Only :func:`build_dir` and
:func:`ensure` import torch and Colossal-AI (the launcher's :func:`timeout_hint` stays cheap).

    python -m helpers.run.kernels [--list | --clear-stale]   # ensure() (make kernels) | locks | clear
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil

NO_CUDA = "no CUDA GPU: Colossal-AI's GPU kernels are not needed here"
CLEAR_COMMAND = "python -m helpers.run.kernels --clear-stale"
TICK_S = 10.0
_COMPILING = re.compile(r"\[extension\] Compiling the JIT (\S+) kernel")
_FINISHED = re.compile(r"\[extension\] Time taken to (?:compile|load) (\S+) op")


def extension_root() -> Path:
    """``~/.cache/colossalai/torch_extensions``, expanded as base_extension.py:55-57 does."""
    return Path(os.path.join(os.path.expanduser("~"), ".cache/colossalai/torch_extensions"))


def build_dir() -> Path:
    """This machine's build folder, by Colossal-AI's own function (imports torch, colossalai)."""
    from colossalai.kernel.extensions.base_extension import _Extension

    return Path(_Extension.get_jit_extension_folder_path())


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
    """Every file named ``lock`` under ``root`` (default :func:`extension_root`), with its holder."""
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
                    f"kept {lock.path}: held by pid {lock.holder} ({lock.how}); a build is running, "
                    f"let it finish",
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


def unfinished_builds(lines: list[str] | str) -> list[str]:
    """Kernels whose last ``[extension]`` line is "Compiling the JIT ..." (build_jit, line 85)."""
    text = lines if isinstance(lines, str) else "\n".join(lines)
    last: dict[str, bool] = {}
    for line in text.splitlines():
        m = _COMPILING.search(line)
        if m:
            last[m.group(1)] = False
        m = _FINISHED.search(line)
        if m:
            last[m.group(1)] = True
    return sorted(name for name, done in last.items() if not done)


def timeout_hint(lines_by_rank: dict[int, list[str]], root: str | Path | None = None) -> str:
    """What a launch timeout should add when Colossal-AI's kernel build is involved, else "".

    Names the ranks that printed "Compiling the JIT ..." and never finished (they were building,
    or waiting on the build lock, when they were killed), and every lock file with no live holder.
    """
    root = Path(root) if root is not None else extension_root()
    building = {r: unfinished_builds(lines) for r, lines in sorted(lines_by_rank.items())}
    building = {r: names for r, names in building.items() if names}
    stale = [lock for lock in locks(root) if lock.stale]
    parts = []
    if building:
        ranks = [r for r in building if r >= 0]
        one = len(ranks) <= 1
        who = (
            f"Ranks {', '.join(map(str, ranks))}"
            if not one
            else f"Rank {ranks[0]}"
            if ranks
            else "A process"
        )
        names = ", ".join(sorted({n for names in building.values() for n in names}))
        parts.append(
            f'{who} printed Colossal-AI\'s "Compiling the JIT {names} kernel" line and '
            f"never finished: {'it was' if one else 'they were'} building the kernel "
            f"(or waiting for another rank's build) when killed, and the build lock left "
            f"behind makes every later Colossal-AI run on this machine wait forever, "
            f"silently. Run `{CLEAR_COMMAND}`, then `make kernels` once (about a minute on "
            f"a fresh GPU machine) before timed runs."
        )
    elif stale:
        parts.append(
            "A kernel build killed earlier left a lock that makes every Colossal-AI run on "
            "this machine wait forever, silently."
        )
    for lock in stale:
        parts.append(
            f"Stale lock (no live process holds it): {lock.path}; delete it: rm {lock.path}"
        )
    return " ".join(parts)


def _wait_for_others(folder: Path, progress: bool, every_s: float = TICK_S) -> None:
    """Wait while another live process holds a lock in ``folder``, then clear what is stale: ninja
    starts each command in a process group of its own, so a killed run's compilers can go on for a
    while (seen on an H200: ``sh`` in the folder after the run's group was SIGKILLed)."""
    start = last = time.monotonic()
    while held := [lock for lock in locks(folder) if lock.holder not in (None, os.getpid())]:
        if progress and time.monotonic() - last >= every_s:
            last = time.monotonic()
            print(
                f"waiting for pid {held[0].holder} ({held[0].how}) to finish building in {folder} "
                f"… {last - start:.0f} s",
                flush=True,
            )
        time.sleep(0.5)
    clear_stale(verbose=progress, root=folder)


@contextmanager
def _ticker(name: str, folder: Path, progress: bool, every_s: float = TICK_S):
    """While the body builds ``name``: a progress line every ``every_s``; if the build this run
    waits for dies meanwhile (its lock left unheld), remove the lock and report ``died``."""
    stop, start, state = threading.Event(), time.monotonic(), {"died": False}

    def tick() -> None:
        while not stop.wait(every_s):
            waited = f"{time.monotonic() - start:.0f} s"
            found = locks(folder)
            other = [lock for lock in found if lock.holder not in (None, os.getpid())]
            if any(lock.stale for lock in found) and clear_stale(verbose=False, root=folder):
                state["died"] = True
                line = (
                    f"the build this run waited for died, leaving its lock in {folder}: removed "
                    f"it; {name} will be built again in a fresh process"
                )
            elif other:
                line = f"waiting for pid {other[0].holder}'s build ({other[0].path}) … {waited}"
            else:  # loading a kernel built before takes a second or two: no line
                line = f"building {name} … {waited} (first build ≈ 1 min, cached in {folder})"
            if progress or state["died"]:
                print(line, flush=True)

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        stop.set()
        thread.join(timeout=1)


def _kernel_name(loader: type) -> str:
    """The extension ``loader`` would use here (KernelLoader.load, kernel_loader.py:61-83)."""
    usable = [ext for ext in (cls() for cls in loader.REGISTRY) if ext.is_available()]
    return max(usable, key=lambda ext: ext.priority).name if usable else loader.__name__


def ensure(progress: bool = True) -> dict[str, float]:
    """Build or load the kernels HybridAdam needs, once per machine; seconds per kernel.

    Notebooks call it before their first Colossal-AI GPU cell; ``make kernels`` runs it. Without
    CUDA: prints :data:`NO_CUDA`. With CUDA: clears stale locks, waits for a live build, loads
    ``CPUAdamLoader`` and ``FusedOptimizerLoader`` (HybridAdam's two loads) with a progress line
    every 10 s; a failed build raises ``RuntimeError`` naming the kernel and the folder.
    """
    import torch

    if not torch.cuda.is_available():
        print(NO_CUDA, flush=True)
        return {}
    from colossalai.kernel.kernel_loader import CPUAdamLoader, FusedOptimizerLoader

    folder = build_dir()
    clear_stale(verbose=True, root=extension_root())
    took = {}
    for loader in (CPUAdamLoader, FusedOptimizerLoader):
        name = _kernel_name(loader)
        _wait_for_others(folder, progress)
        cached, start = (folder / f"{name}.so").exists(), time.monotonic()
        with _ticker(name, folder, progress) as state:
            try:
                loader().load()
            except Exception as err:
                if state["died"]:  # torch's versioner in this process would skip the build now
                    subprocess.run([sys.executable, "-m", "helpers.run.kernels"], check=True)
                    return took
                raise RuntimeError(
                    f"Colossal-AI's {name} kernel could not be built or loaded in "
                    f"{folder}: {type(err).__name__}: {err}"
                ) from err
        took[name] = time.monotonic() - start
        if progress:
            print(
                f"{name}: {'loaded' if cached else 'built'} in {took[name]:.1f} s ({folder})",
                flush=True,
            )
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m helpers.run.kernels", description=__doc__.split("\n")[0]
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--list", action="store_true", help="every lock file and the built kernels")
    what.add_argument(
        "--clear-stale", action="store_true", help="delete locks no live process holds"
    )
    parser.add_argument(
        "--root", help="where to look (default ~/.cache/colossalai/torch_extensions)"
    )
    args = parser.parse_args(argv)
    root = Path(args.root) if args.root else extension_root()
    if args.list:
        found = locks(root)
        print("\n".join(map(str, found)) if found else f"no lock file under {root}")
        for so in sorted(root.rglob("*.so")) if root.is_dir() else []:
            print(f"built: {so}")
    elif args.clear_stale:
        removed = clear_stale(verbose=True, root=root)
        if not removed:
            print(f"no stale lock under {root}")
    else:
        ensure(progress=True)


if __name__ == "__main__":
    main()
