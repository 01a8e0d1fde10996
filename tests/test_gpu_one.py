"""The launcher's rule on a box with one or more GPUs (``make test-gpu``; skipped without CUDA).

Chapter 1, "Where the ranks run": ranks <= GPUs -> every rank on its own GPU with NCCL; more
ranks than GPUs -> every rank on the CPU with gloo and CUDA hidden, so Colossal-AI cannot put a
model on a GPU that the batches never reach.
"""

import pytest

from helpers.run.env import gpu_count
from helpers.run.launch import launch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(gpu_count() < 1, reason="needs a CUDA GPU")]


def test_a_one_rank_demo_uses_the_gpu():
    [r] = launch("selftest", nproc=1, show="none").results
    assert (r["backend"], r["device"], r["cuda_visible"]) == ("nccl", "cuda:0", True)


def test_more_ranks_than_gpus_run_on_the_cpu_with_cuda_hidden():
    ranks = launch("selftest", nproc=gpu_count() + 1, show="none").results
    assert {(r["backend"], r["device"], r["cuda_visible"]) for r in ranks} == {
        ("gloo", "cpu", False)
    }


def test_colossal_ai_ddp_on_more_ranks_than_gpus():
    """The one-GPU failure this rule fixes: Colossal-AI's model on cuda:0, the batch on the CPU."""
    ranks = launch("ch01_colossal_ddp", nproc=gpu_count() + 1, show="none", timeout_s=300).results
    assert {r["backend"] for r in ranks} == {"gloo"}
