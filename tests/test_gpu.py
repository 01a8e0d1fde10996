"""GPU path (``make test-gpu``): the Chapter 1 demos on NCCL and HybridParallelPlugin for real.

Skipped on machines with fewer than two CUDA GPUs; CI has none, the GPU box runs them.
"""

import pytest

from helpers.env import gpu_count
from helpers.launch import launch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(gpu_count() < 2, reason="needs at least two CUDA GPUs"),
]


@pytest.mark.parametrize("demo", ["ch01_dp", "ch01_tp", "ch01_pp", "ch01_sp", "ch01_colossal_ddp"])
def test_from_scratch_demos_run_on_nccl(demo):
    result = launch(demo, nproc=2, show="none", timeout_s=300)
    assert {r["backend"] for r in result.results} == {"nccl"}


# The HybridParallelPlugin layouts run in the notebook's GPU path (make test-gpu executes it), each
# asserting its match with the single-GPU reference; recording them is `python -m helpers.chapter01 --record`.
