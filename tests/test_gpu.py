"""GPU path (``make test-gpu``): the Chapter 1 demos on NCCL and HybridParallelPlugin for real.

Skipped on machines with fewer than two CUDA GPUs; CI has none, the GPU box runs them.
"""

import pytest

from helpers.run.env import gpu_count
from helpers.run.launch import launch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(gpu_count() < 2, reason="needs at least two CUDA GPUs"),
]


@pytest.mark.parametrize("demo", ["ch01_dp", "ch01_tp", "ch01_pp", "ch01_sp", "ch01_colossal_ddp"])
def test_from_scratch_demos_run_on_nccl(demo):
    result = launch(demo, nproc=2, show="none", timeout_s=300)
    assert {r["backend"] for r in result.results} == {"nccl"}


# The HybridParallelPlugin layouts run in the notebook's GPU path (make test-gpu executes it), each
# asserting its match with the single-GPU reference; recording them is
# `python -m helpers.record ch01 --record`.


def test_hybrid_parallel_kill_and_resume_and_reshard_on_gpus(tmp_path):
    """Chapter 5 on GPUs (helpers.record.ch05): tp=2 killed and resumed from a sharded
    checkpoint within bf16 rounding; its step-3 checkpoint continued as dp=2."""
    from helpers.record.ch05 import kill_and_resume, reshard

    kr = kill_and_resume("tp2", tmp_path, "none")
    assert kr["runs"][1]["failed_rank"] == 1 and kr["on_disk_after_kill"] == ["step_00000003"]
    assert kr["max_loss_diff"] < 1e-3 and kr["weights"]["max_abs_diff"] <= 2**-7
    rs = reshard(tmp_path, "none")
    assert rs["max_loss_diff_vs_source"] < 5 * rs["max_loss_diff_from_scratch"] < 1e-2
