"""Chapter 8's lab "A stale kernel-build lock": torch's build lock, left behind by a killed build.

Used by ``helpers/demos/ch08_kernel_lock.py`` (the failure labs ``stale_kernel_lock`` and
``stale_kernel_lock_cleared``) and by Chapter 10's pitfall, in-process. Three runs share one
build folder in a fresh temporary directory (never ~/.cache). Each run does what Colossal-AI's
``build_jit`` (colossalai/kernel/extensions/cuda_extension.py:65-104) and torch's
``_jit_compile`` (torch/utils/cpp_extension.py:2345-2400) do, with torch's own ``FileBaton`` on a
file named ``lock``, and a sleep standing in for ninja and nvcc:

1. run 1 prints "Compiling the JIT fused_optim_cuda kernel", takes the baton and is SIGKILLed
   mid-build, as a launch timeout kills a rank; the lock stays (``clear_stale`` keeps it while
   run 1 lives: a live holder has it open);
2. run 2 prints the same line and waits in ``FileBaton.wait()``, silent, until this lab's timeout;
3. with ``clear``: :func:`helpers.run.build_lock.locks` reports the lock stale, ``clear_stale``
   removes it, and run 3 takes the baton, builds and finishes.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from helpers.run.build_lock import clear_stale, locks
from helpers.run.kernels import timeout_hint

KERNEL = "fused_optim_cuda"
FOLDER = "torch2.13_cuda-lab"  # the shape of base_extension.py:56's folder name
_BUILD = """
import sys, time
from torch.utils.file_baton import FileBaton
folder, name, build_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()  # imported torch while the previous run went on; start when told
so = f"{folder}/{name}.so"
try:
    open(so).close()
    print(f"[extension] Loading the JIT-built {name} kernel during runtime now", flush=True)
except FileNotFoundError:
    print(f"[extension] Compiling the JIT {name} kernel during runtime now", flush=True)
start = time.time()
baton = FileBaton(f"{folder}/lock")
if baton.try_acquire():  # _jit_compile, cpp_extension.py:2346
    try:
        time.sleep(build_s)  # ninja + nvcc
        open(so, "w").close()
    finally:
        baton.release()  # cpp_extension.py:2398
else:
    baton.wait()  # cpp_extension.py:2400: spins while the file exists, silently, forever
print(f"[extension] Time taken to compile {name} op: {time.time() - start} seconds", flush=True)
"""


class _Run:
    """One stand-in Colossal-AI run: a process whose lines are collected (and echoed)."""

    def __init__(
        self, label: str, folder: Path, build_s: float, echo: Callable[[str], None] | None
    ):
        self.label, self.echo, self.lines = label, echo, []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BUILD, str(folder), KERNEL, str(build_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if self.echo and self.lines[-1] != "ready":
                self.echo(f"{self.label}: {self.lines[-1]}")

    def wait_for(self, test: Callable[[], bool], what: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not test():
            if self.proc.poll() is not None and not test():
                raise RuntimeError(
                    f"{self.label} ended (exit code {self.proc.returncode}) before "
                    f"{what}: {self.lines[-5:]}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: no {what} within {timeout_s:g} s")
            time.sleep(0.02)

    def go(self) -> None:
        self.wait_for(lambda: "ready" in self.lines, "start-up")
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def kill(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        rc = self.proc.wait()
        self.reader.join(timeout=5)
        return rc


def reproduce(
    timeout_s: float = 3.0, clear: bool = True, echo: Callable[[str], None] | None = print
) -> dict:
    """Runs 1-3 above in a temporary folder (removed afterwards); what each step showed."""
    root = Path(tempfile.mkdtemp(prefix="ch08-kernel-lock-"))
    folder, say = root / FOLDER, echo or (lambda _line: None)
    folder.mkdir()
    lock = (folder / "lock").resolve()
    runs = [_Run(f"run {k}", folder, 600.0 if k == 1 else 0.3, echo) for k in (1, 2, 3)]
    try:
        first, second, third = runs
        first.go()
        first.wait_for(lambda: lock.exists(), "lock file")
        seen = locks(root)
        held = [x.holder for x in seen] == [first.proc.pid]
        say(f"while run 1 builds: {', '.join(map(str, seen))}")
        kept = clear_stale(verbose=echo is not None, root=root) == [] and lock.exists()
        run1_rc = first.kill()  # the launcher's timeout: SIGKILL, mid-build
        left = lock.exists()
        say(f"run 1 killed with SIGKILL mid-build (exit code {run1_rc}); lock left behind: {left}")
        second.go()
        second.wait_for(lambda: any("Compiling the JIT" in x for x in second.lines), "first line")
        printed = len(second.lines)
        time.sleep(timeout_s)  # this lab's timeout
        silent = second.proc.poll() is None and len(second.lines) == printed
        second.kill()
        hint = timeout_hint({0: [x for x in second.lines if x != "ready"]}, root=root)
        say(
            f"run 2 ran past its {timeout_s:g} s timeout, silent after its first line "
            f"({'still waiting' if silent else 'not waiting'}); killed. Hint: {hint}"
        )
        result = {
            "held_by_run1": held,
            "kept_while_held": kept,
            "run1_exit": run1_rc,
            "lock_left": left,
            "run2_silent": silent,
            "hint_names_lock": f"rm {lock}" in hint,
        }
        if not clear:
            return result
        stale = [x for x in locks(root) if x.stale]
        removed = clear_stale(verbose=echo is not None, root=root)
        third.go()
        rc3 = third.proc.wait(timeout=120)
        third.reader.join(timeout=5)
        return {
            **result,
            "stale_found": len(stale),
            "removed": len(removed),
            "run3_exit": rc3,
            "run3_finished": bool(third.lines) and "Time taken to compile" in third.lines[-1],
            "lock_after": lock.exists(),
            "kernel_built": (folder / f"{KERNEL}.so").exists(),
        }
    finally:
        for run in runs:
            run.kill()
        shutil.rmtree(root, ignore_errors=True)
