"""helpers.run.kernels and Chapter 8's stale kernel-lock lab: a lock a live process holds is kept,
an orphaned one is removed, the launcher's hint names the ranks and the path, ensure() on the CPU
says so in one line, and the lab reproduces the hang and its fix. Everything works on temporary
folders: the real ~/.cache is never touched (ensure() returns before it looks when there is no
CUDA)."""

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from helpers.run import kernels
from helpers.train.diagnose import diagnose

COMPILING = "[extension] Compiling the JIT fused_optim_cuda kernel during runtime now"
FINISHED = "[extension] Time taken to compile fused_optim_cuda op: 54.1 seconds"
# a process that takes a lock as torch's FileBaton.try_acquire does and keeps the descriptor open
HOLD = (
    "import os, sys, time; os.open(sys.argv[1], os.O_CREAT | os.O_EXCL); "
    "print('held', flush=True); time.sleep(120)"
)


def _start(args, **kw):
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True, **kw)


@pytest.fixture
def root(tmp_path):
    held, orphan = tmp_path / "torch2.13_cuda-12.8-aaa", tmp_path / "torch2.13_cuda-12.8-bbb"
    held.mkdir()
    orphan.mkdir()
    proc = _start(["-c", HOLD, str(held / "lock")])
    assert proc.stdout.readline().strip() == "held"
    os.close(os.open(orphan / "lock", os.O_CREAT | os.O_EXCL))  # taken, then its holder died
    yield tmp_path, proc
    proc.kill()
    proc.wait()


def test_locks_name_the_live_holder(root):
    tmp, proc = root
    found = {lock.path.parent.name: lock for lock in kernels.locks(tmp)}
    assert sorted(found) == ["torch2.13_cuda-12.8-aaa", "torch2.13_cuda-12.8-bbb"]
    held, orphan = found["torch2.13_cuda-12.8-aaa"], found["torch2.13_cuda-12.8-bbb"]
    assert held.holder == proc.pid and held.how == "has it open" and not held.stale
    assert orphan.holder is None and orphan.stale
    assert 0 <= orphan.age_s < 60


def test_clear_stale_removes_only_the_orphan(root, capsys):
    tmp, proc = root
    held, orphan = (
        tmp / "torch2.13_cuda-12.8-aaa" / "lock",
        tmp / "torch2.13_cuda-12.8-bbb" / "lock",
    )
    assert kernels.clear_stale(root=tmp) == [orphan.resolve()]
    assert held.exists() and not orphan.exists()
    out = capsys.readouterr().out
    assert f"removed stale lock {orphan.resolve()}: no live process has it open" in out
    assert f"kept {held.resolve()}: held by pid {proc.pid} (has it open)" in out
    assert kernels.clear_stale(root=tmp) == []  # the held one is still kept
    proc.kill()
    proc.wait()  # its holder gone (and reaped), the same lock is now stale
    assert kernels.clear_stale(verbose=False, root=tmp) == [held.resolve()]
    assert kernels.locks(tmp) == []


def test_a_process_building_in_the_folder_holds_it(tmp_path):
    """ninja runs with the build folder as its cwd (torch/utils/cpp_extension.py:2898)."""
    folder = tmp_path / "build"
    folder.mkdir()
    (folder / "lock").touch()
    proc = _start(["-c", "import time; print('up', flush=True); time.sleep(120)"], cwd=folder)
    try:
        assert proc.stdout.readline().strip() == "up"
        [lock] = kernels.locks(tmp_path)
        assert lock.holder == proc.pid and lock.how.startswith("runs in its folder")
        assert (
            kernels.clear_stale(verbose=False, root=tmp_path) == [] and (folder / "lock").exists()
        )
    finally:
        proc.kill()
        proc.wait()


def test_no_root_no_locks(tmp_path):
    assert kernels.locks(tmp_path / "absent") == []
    assert kernels.timeout_hint({0: [FINISHED]}, root=tmp_path / "absent") == ""


def test_timeout_hint_names_ranks_and_path(tmp_path):
    lock = tmp_path / "torch2.13_cuda-12.8-ccc" / "lock"
    lock.parent.mkdir()
    lock.touch()
    lines = {0: ["step 0", COMPILING], 1: [COMPILING], 2: ["step 0"], -1: ["torchrun"]}
    hint = kernels.timeout_hint(lines, root=tmp_path)
    assert hint.startswith("Ranks 0, 1 printed Colossal-AI's")
    assert "python -m helpers.run.kernels --clear-stale" in hint and "make kernels" in hint
    assert f"rm {lock.resolve()}" in hint
    one = kernels.timeout_hint({3: [COMPILING]}, root=tmp_path / "absent")
    assert one.startswith("Rank 3 printed") and "it was building" in one and "rm " not in one


def test_timeout_hint_quiet_when_builds_finished_and_no_stale_lock(tmp_path):
    assert kernels.timeout_hint({0: [COMPILING, FINISHED], 1: ["x"]}, root=tmp_path) == ""
    (tmp_path / "lock").touch()  # a stale lock alone is still worth a sentence
    hint = kernels.timeout_hint({0: [COMPILING, FINISHED]}, root=tmp_path)
    assert hint.startswith("A kernel build killed earlier left a lock")
    assert hint.endswith(f"rm {(tmp_path / 'lock').resolve()}")


def test_unfinished_builds_reads_the_last_line_per_kernel():
    assert kernels.unfinished_builds([COMPILING, FINISHED, COMPILING]) == ["fused_optim_cuda"]
    assert kernels.unfinished_builds([COMPILING, COMPILING, FINISHED]) == []
    assert kernels.unfinished_builds("[extension] Loading the JIT-built cpu_adam_x86 kernel") == []


def test_timeout_hint_imports_neither_torch_nor_colossalai(tmp_path):
    code = (
        "import sys; from helpers.run import kernels; "
        f"print(kernels.timeout_hint({{0: [{COMPILING!r}]}}, root={str(tmp_path)!r})[:4]); "
        "print('torch' in sys.modules, 'colossalai' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split("\n")[:2] == ["Rank", "False False"]


def test_ensure_without_cuda_prints_one_line(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: ensure() would build the kernels")
    assert kernels.ensure() == {}
    assert capsys.readouterr().out == kernels.NO_CUDA + "\n"


def test_cli_list_and_clear(tmp_path):
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "lock").touch()
    (tmp_path / "f" / "fused_optim_cuda.so").touch()
    cli = [sys.executable, "-m", "helpers.run.kernels", "--root", str(tmp_path)]
    listed = subprocess.run([*cli, "--list"], capture_output=True, text=True, check=True).stdout
    assert "stale: no live holder" in listed and "built: " in listed
    cleared = subprocess.run(
        [*cli, "--clear-stale"], capture_output=True, text=True, check=True
    ).stdout
    assert cleared.startswith("removed stale lock") and not (tmp_path / "f" / "lock").exists()
    again = subprocess.run(
        [*cli, "--clear-stale"], capture_output=True, text=True, check=True
    ).stdout
    assert again.strip() == f"no stale lock under {tmp_path}"


def test_diagnose_kernel_lock_only_when_a_build_never_finished():
    assert diagnose(f"{COMPILING}\n").kind == "stale_kernel_lock"
    assert diagnose(f"[rank0]:{COMPILING}\n[rank1]:{COMPILING}\n").kind == "stale_kernel_lock"
    assert diagnose(f"{COMPILING}\n{FINISHED}\nstep 1 loss 2.3\n").kind == "none"
    failed = f"{COMPILING}\nRuntimeError: Error building extension 'fused_optim_cuda'\n"
    assert diagnose(failed).kind == "unknown"  # a compiler error is not a lock


def test_lab_reproduces_the_hang_and_the_fix():
    """Chapter 8's lab end to end (the failing half is test_ch08's test_lab_diagnosed)."""
    from helpers.train.labs import run_lab

    run = run_lab("stale_kernel_lock_cleared")
    assert run.returncode == 0 and run.diagnosis.kind == "none", run.log[-2000:]
    result = json.loads(next(ln for ln in run.log.splitlines() if ln.startswith("RESULT "))[7:])
    assert result["held_by_run1"] and result["kept_while_held"] and result["run1_exit"] == -9
    assert result["lock_left"] and result["run2_silent"] and result["hint_names_lock"]
    assert result["stale_found"] == 1 and result["removed"] == 1
    assert result["run3_exit"] == 0 and result["run3_finished"] and result["kernel_built"]
    assert not result["lock_after"]
    folder = re.search(r"(\S+ch08-kernel-lock-[^/\s]+)/", run.log).group(1)  # a temporary folder
    assert Path(folder).parent == Path(tempfile.gettempdir()) and not Path(folder).exists()
    assert run.seconds < 120  # the lab's own run, whether made here or shared


def test_ensure_waits_for_a_live_build_then_clears(tmp_path, capsys):
    """ensure()'s wait (no CUDA needed): a live holder is waited for; once it dies, its lock
    goes."""
    lock = tmp_path / "lock"
    proc = _start(["-c", HOLD, str(lock)])
    assert proc.stdout.readline().strip() == "held"
    threading.Timer(1.0, proc.kill).start()
    kernels._wait_for_others(tmp_path, progress=True, every_s=0.3)
    proc.wait()
    assert not lock.exists()
    out = capsys.readouterr().out
    assert f"waiting for pid {proc.pid} (has it open)" in out and "removed stale lock" in out


def test_ticker_notices_a_build_that_died_while_waited_for(tmp_path, capsys):
    (tmp_path / "lock").touch()  # the holder this run waited for was killed
    with kernels._ticker("fused_optim_cuda", tmp_path, progress=False, every_s=0.2) as state:
        deadline = time.monotonic() + 10
        while not state["died"] and time.monotonic() < deadline:
            time.sleep(0.1)
    assert state["died"] and not (tmp_path / "lock").exists()
    assert "the build this run waited for died" in capsys.readouterr().out
