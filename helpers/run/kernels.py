"""Colossal-AI's JIT-built kernels: build them once and visibly, and find a build lock left stale.

Chapter 8, section "A stale kernel-build lock" (failure labs ``stale_kernel_lock`` and
``stale_kernel_lock_cleared``, :mod:`helpers.train.kernel_lock_lab`) and Chapter 10's pitfall
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
  kernel of one machine shares that folder, so they share one lock: torch's build lock
  (:mod:`helpers.run.build_lock`, which finds the locks and their holders).

Only :func:`build_dir` and :func:`ensure` import torch and Colossal-AI (the launcher's
:func:`timeout_hint` stays cheap).

    python -m helpers.run.kernels                  # ensure(): what ``make kernels`` runs
    python -m helpers.run.kernels --list           # every lock file and the built kernels
    python -m helpers.run.kernels --clear-stale    # delete locks no live process holds
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
from pathlib import Path

from helpers.run.build_lock import clear_stale, extension_root, locks

NO_CUDA = "no CUDA GPU: Colossal-AI's GPU kernels are not needed here"
CLEAR_COMMAND = "python -m helpers.run.kernels --clear-stale"
TICK_S = 10.0
_COMPILING = re.compile(r"\[extension\] Compiling the JIT (\S+) kernel")
_FINISHED = re.compile(r"\[extension\] Time taken to (?:compile|load) (\S+) op")


def build_dir() -> Path:
    """This machine's build folder, by Colossal-AI's own function (imports torch, colossalai)."""
    from colossalai.kernel.extensions.base_extension import _Extension

    return Path(_Extension.get_jit_extension_folder_path())


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
