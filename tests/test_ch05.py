"""Chapter 5: launching, checkpoints, resume and the fault demo.

Four torchrun launches on the tiny config (2 layers, 8 steps): an uninterrupted run; a run whose
rank 1 is SIGKILLed in the middle of saving step 6; its resumption, which must end bitwise equal
to the uninterrupted run; and a resume on a different world size, which must be refused. The rest
runs in-process or in a plain subprocess.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from helpers.train import checkpoint as ckpt
from helpers.chapters.ch05_launch import hostfile_commands
from helpers.train.weights import compare_final_weights
from helpers.run.env import losses_from_lines
from helpers.config.loading import load_config
from helpers.config.plugin import build_plugin
from helpers.run.failure import LAUNCHER, failing_rank as _failing_rank
from helpers.run.launch import REPO_ROOT, LaunchError, LaunchTimeout, launch

CONFIG = "helpers/demos/ch05_tiny.yaml"
ARGS = ["--config", CONFIG, "--bucket_cap_mb", "0.05"]
TIMEOUT = 240


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    full_dir, crash_dir = tmp_path_factory.mktemp("full"), tmp_path_factory.mktemp("crash")
    full = launch(
        "ch05_train", 2, ARGS + ["--checkpoint_dir", str(full_dir)], show="none", timeout_s=TIMEOUT
    )
    start = time.monotonic()
    with pytest.raises(LaunchError) as killed:
        launch(
            "ch05_train",
            2,
            ARGS
            + [
                "--checkpoint_dir",
                str(crash_dir),
                "--kill_at",
                "6",
                "--kill_rank",
                "1",
                "--kill_in_save",
            ],
            show="none",
            timeout_s=TIMEOUT,
        )
    killed_s = time.monotonic() - start
    after_kill = sorted(p.name for p in crash_dir.iterdir())
    resumed = launch(
        "ch05_train",
        2,
        ARGS + ["--checkpoint_dir", str(crash_dir), "--resume"],
        show="none",
        timeout_s=TIMEOUT,
    )
    return dict(
        full=full,
        full_dir=full_dir,
        crash_dir=crash_dir,
        killed=killed.value,
        killed_s=killed_s,
        after_kill=after_kill,
        resumed=resumed,
    )


def test_a_killed_rank_ends_the_job_and_is_named(runs):
    err = runs["killed"]
    assert (
        not isinstance(err, LaunchTimeout) and runs["killed_s"] < TIMEOUT
    )  # torchrun ended it: no hang
    assert err.rank == 1 and err.returncode != 0
    assert "on rank 1" in str(err) and "rank 1 killed while saving step 6" in str(err)


def test_a_kill_mid_save_leaves_no_checkpoint(runs):
    assert runs["after_kill"] == [".tmp-step_00000006", "step_00000003"]
    logged = losses_from_lines(runs["killed"].lines[0])
    assert sorted(logged) == [1, 2, 3, 4, 5, 6]
    assert [logged[s] for s in range(1, 7)] == runs["full"].results[-1]["losses"][:6]


def test_resume_is_bitwise_equal_to_an_uninterrupted_run(runs):
    full, resumed = runs["full"].results[-1], runs["resumed"].results[-1]
    assert any("resumed from step_00000003" in line for line in runs["resumed"].lines[0])
    assert full["final"] and resumed["final"]
    assert resumed["losses"] == full["losses"]  # every float identical, not merely close
    assert resumed["digest"] == full["digest"]
    same = compare_final_weights(
        runs["crash_dir"] / "step_00000008", runs["full_dir"] / "step_00000008"
    )
    assert same["max_abs_diff"] == 0.0 and same["same_digest"] and same["tensors"] > 10
    meta = ckpt.read_meta(runs["crash_dir"] / "step_00000008")
    assert meta["step"] == 8 and meta["data"] == {
        "epoch": 2,
        "batch_in_epoch": 0,
        "samples_seen": 64,
    }
    assert not (
        runs["crash_dir"] / ".tmp-step_00000006"
    ).exists()  # the resumed run's save replaced it
    # keep_last: 2 in the config: step 3 went once step 8 was published
    assert sorted(p.name for p in runs["crash_dir"].iterdir()) == ["step_00000006", "step_00000008"]


def test_resume_refuses_a_different_world_size(runs):
    with pytest.raises(LaunchError) as info:
        launch(
            "ch05_train",
            1,
            ARGS + ["--checkpoint_dir", str(runs["crash_dir"]), "--resume"],
            show="none",
            timeout_s=TIMEOUT,
        )
    message = str(info.value)
    assert "IncompatibleCheckpoint" in message and "cannot resume step_00000008" in message
    assert "world_size 2 -> 1" in message and "data 2 -> 1" in message


# --- without torchrun ---------------------------------------------------------------------------

KILL_MID_SAVE = textwrap.dedent("""
    import os, signal, sys
    from helpers.train.checkpoint import atomic_dir, step_dir
    with atomic_dir(step_dir(sys.argv[1], int(sys.argv[2]))) as tmp:
        (tmp / "model.pt").write_bytes(b"half a checkpoint")
        os.kill(os.getpid(), signal.SIGKILL)
""")


def test_sigkill_inside_an_atomic_save_never_publishes_it(tmp_path):
    with ckpt.atomic_dir(ckpt.step_dir(tmp_path, 3)) as tmp:
        (tmp / "model.pt").write_bytes(b"complete")
    proc = subprocess.run([sys.executable, "-c", KILL_MID_SAVE, str(tmp_path), "6"], cwd=REPO_ROOT)
    assert proc.returncode == -signal.SIGKILL
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-step_00000006", "step_00000003"]
    assert ckpt.latest(tmp_path).name == "step_00000003"
    with ckpt.atomic_dir(ckpt.step_dir(tmp_path, 6)) as tmp:  # the next save of step 6 starts clean
        assert list(tmp.iterdir()) == []
        (tmp / "model.pt").write_bytes(b"complete")
    with ckpt.atomic_dir(
        ckpt.step_dir(tmp_path, 6)
    ) as tmp:  # saving a step again replaces it whole
        (tmp / "optimizer.pt").write_bytes(b"new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000003", "step_00000006"]
    assert [p.name for p in (tmp_path / "step_00000006").iterdir()] == ["optimizer.pt"]
    with pytest.raises(RuntimeError), ckpt.atomic_dir(ckpt.step_dir(tmp_path, 9)):
        raise RuntimeError("crash while writing")
    assert ckpt.latest(tmp_path).name == "step_00000006"


def test_sampler_resumes_mid_epoch():
    data = list(range(24))
    whole = [
        list(ckpt.ResumableSampler(data, num_replicas=2, rank=r, shuffle=True, seed=5))
        for r in (0, 1)
    ]
    for r in (0, 1):
        s = ckpt.ResumableSampler(data, num_replicas=2, rank=r, shuffle=True, seed=5)
        s.set_position(epoch=0, start=8)
        assert list(s) == whole[r][8:] and len(whole[r]) == 12
        assert len(list(s)) == 12  # the next epoch is whole again
    s.set_position(epoch=1, start=0)
    assert list(s) != whole[1]  # a new epoch, a new order


def test_rng_state_round_trip():
    import random

    import numpy as np

    draw = lambda: (torch.rand(3), random.random(), np.random.rand())  # noqa: E731
    state = ckpt.rng_state()
    first = draw()
    ckpt.set_rng_state(state)
    again = draw()
    assert torch.equal(first[0], again[0]) and first[1:] == again[1:]


def test_layout_mismatch_message_says_what_and_why(tmp_path):
    saved = {"world_size": 2, "data": 2, "micro_batch": 2}
    with pytest.raises(ckpt.IncompatibleCheckpoint, match=r"world_size 2 -> 4.*RNG stream"):
        ckpt.check_layout(
            saved, {"world_size": 4, "data": 4, "micro_batch": 2}, tmp_path / "step_00000003"
        )
    ckpt.check_layout(saved, dict(saved), tmp_path)


def test_model_parallel_configs_are_refused_on_the_cpu_with_a_reason():
    cfg = load_config(CONFIG, world_size=4).with_changes({"parallelism": {"data": 2, "tensor": 2}})
    with pytest.raises(
        RuntimeError,
        match=r"HybridParallelPlugin\) needs GPUs.*cpu_accelerator.py:106.*4 CUDA GPUs",
    ):
        build_plugin(cfg, torch.device("cpu"))


def test_colossalai_run_hostfile_translates_to_one_torchrun_per_node(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("node-a\nnode-b\n\n")
    cmds = hostfile_commands(hostfile, 8, "helpers.demos.ch05_train", ["--config", CONFIG])
    assert [h for h, _ in cmds] == ["node-a", "node-b"]
    for rank, (_, cmd) in enumerate(cmds):
        assert cmd.startswith("torchrun --nproc_per_node=8 --nnodes=2 ")
        assert (
            f"--node_rank={rank} --master_addr=node-a --master_port=29500 "
            "-m helpers.demos.ch05_train" in cmd
        )


def test_a_signalled_rank_wins_over_torchruns_same_second_tie_break():
    launcher = [
        "Root Cause (first observed failure):",
        "[0]:",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : 1 (pid: 11)",
        "[1]:",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : -9 (pid: 12)  (SIGKILL)",
    ]
    knock_on = [
        "Traceback (most recent call last):",
        "RuntimeError: [pair.cc:553] Connection closed by peer",
    ]
    assert _failing_rank({0: knock_on, 1: ["FAULT rank 1 killed"], LAUNCHER: launcher}) == 1
    sigterm = [
        "Root Cause (first observed failure):",
        "[0]:",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -15 (pid: 11)  (SIGTERM)",
    ]
    assert _failing_rank({0: [], LAUNCHER: sigterm}) == 0  # torchrun's own SIGTERM is not a cause


def test_reshard_accepts_another_split_but_not_another_run(tmp_path):
    saved = {
        "world_size": 2,
        "data": 2,
        "tensor": 1,
        "pipeline": 1,
        "sequence": 1,
        "batch_size": 8,
        "micro_batch": 2,
        "seed": 0,
    }
    ckpt.check_layout(
        saved,
        {**saved, "world_size": 1, "data": 1, "tensor": 2, "micro_batch": 8},
        tmp_path,
        reshard=True,
    )
    with pytest.raises(
        ckpt.IncompatibleCheckpoint, match=r"cannot reshard .*batch_size 8 -> 16.*global batch"
    ):
        ckpt.check_layout(
            saved, {**saved, "batch_size": 16}, tmp_path / "step_00000003", reshard=True
        )


def test_gpu_comm_share_counts_only_nccl_time_no_other_kernel_hides():
    from helpers.train.signals import kernel_comm_times

    kernels = [
        (0, 10, "ampere_bf16_gemm"),
        (5, 20, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),
        (18, 30, "elementwise_kernel"),
        (25, 40, "ncclDevKernel_AllGather_RING_LL"),
    ]
    busy, exposed = kernel_comm_times(kernels)
    assert busy == 30  # 5..20 and 25..40
    assert exposed == 30 - (5 + 2 + 5)  # minus 5..10, 18..20 and 25..30, where compute ran too
    assert kernel_comm_times([(0, 1, "gemm")]) == (0, 0)


def test_prune_keeps_the_newest_and_the_one_just_written(tmp_path):
    for step in (3, 6, 9, 12):
        (ckpt.step_dir(tmp_path, step)).mkdir()
    (tmp_path / ".tmp-step_00000015").mkdir()  # an interrupted save is not a checkpoint: left alone
    gone = ckpt.prune(tmp_path, 2)
    assert [p.name for p in gone] == ["step_00000003", "step_00000006"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".tmp-step_00000015",
        "step_00000009",
        "step_00000012",
    ]
    # a resumed run that re-saved step 9 while an earlier run had gone further keeps its own save
    assert ckpt.prune(tmp_path, 1, protect=ckpt.step_dir(tmp_path, 9)) == []
    with pytest.raises(ValueError, match="at least 1"):
        ckpt.prune(tmp_path, 0)
