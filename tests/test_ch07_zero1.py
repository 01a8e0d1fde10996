"""Chapter 7's from-scratch ZeRO-1 demo (helpers/demos/ch07_zero1.py) and its bookkeeping
(helpers/parallel/zero.py).

The in-process tests check the padded flat layout, the bytes sent per step and that the demo's Adam
steps agree bitwise with ``torch.optim.Adam``. Three torchrun launches on gloo (2 and 4 ranks, and a
bad batch size), ~10-20 s each on a 2-core machine.
"""

import pytest
import torch

from helpers.run.launch import LaunchError, launch
from helpers.cost.memory import model_states, predicted_optimizer_bytes
from helpers.parallel.zero import adam_step_, comm_bytes_per_step, flat_layout

TOL = 1e-5  # the demo's own fp32 tolerance on the CPU
PSI = 8 * 32 + 32 + 32 + 1  # the demo's MLP 8 -> 32 -> 1: 321 parameters


# ---------------------------------------------------------------- in-process, no torchrun


def test_flat_layout_pads_to_equal_shards():
    lay = flat_layout(PSI, 4)
    assert (lay.shard, lay.padded, lay.pad) == (81, 324, 3)
    assert lay.owned(0) == slice(0, 81) and lay.owned(3) == slice(243, 324)
    assert flat_layout(322, 2).pad == 0
    with pytest.raises(ValueError, match="every rank must own at least one parameter"):
        flat_layout(3, 4)
    with pytest.raises(ValueError, match="leave the last rank only padding"):
        flat_layout(5, 4)
    with pytest.raises(ValueError, match="positive integer"):
        flat_layout(10, 0)
    with pytest.raises(ValueError, match="outside a data-parallel group of 4"):
        lay.owned(4)


def test_prediction_and_comm_bytes():
    lay = flat_layout(PSI, 4)
    predicted, padding = predicted_optimizer_bytes(lay)
    assert predicted == model_states(PSI, "fp32", 1, dp=4)[2] == 8 * PSI / 4
    assert predicted + padding == 8 * lay.shard  # m and v of one padded slice
    comm = comm_bytes_per_step(lay, 4)
    assert (
        comm["reduce_scatter"] == comm["all_gather"] == 3 * 81 * 4
    )  # (N-1)/N of the 1296 B buffer
    assert comm["total"] == comm["all_reduce"] == 2 * 3 * 1296 // 4


def test_adam_steps_bitwise_equal_torch_optim_adam():
    """Both the demo's sharded update and its reference (torch.optim.adam.adam) are
    torch.optim.Adam."""
    from helpers.train.reference import reference_adam_step

    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(10, generator=g)
    grads = [torch.randn(10, generator=g) for _ in range(5)]
    opt_w = w0.clone().requires_grad_()
    opt = torch.optim.Adam([opt_w], lr=1e-2)
    fn_w = w0.clone().requires_grad_()
    fn_state = [torch.zeros(10)], [torch.zeros(10)], [torch.tensor(0.0)]
    mine_w, m, v = w0.clone(), torch.zeros(10), torch.zeros(10)
    for step, grad in enumerate(grads, 1):
        opt_w.grad = grad.clone()
        opt.step()
        fn_w.grad = grad.clone()
        with torch.no_grad():
            reference_adam_step([fn_w], *fn_state, 1e-2, (0.9, 0.999), 1e-8)
        adam_step_(mine_w, grad, m, v, step, 1e-2)
    assert torch.equal(fn_w.detach(), opt_w.detach())
    assert torch.equal(mine_w, opt_w.detach())
    assert torch.equal(m, opt.state[opt_w]["exp_avg"]) and torch.equal(
        v, opt.state[opt_w]["exp_avg_sq"]
    )


# ---------------------------------------------------------------- torchrun launches


@pytest.mark.parametrize("nproc", [2, 4])
def test_zero1_matches_adam_and_shards_optimizer_state(nproc):
    res = launch("ch07_zero1", nproc=nproc, show="none")
    assert len(res.results) == nproc
    lay = flat_layout(PSI, nproc)
    predicted = 8 * PSI / nproc  # helpers.cost.memory: fp32 Adam, ZeRO-1, optimizer bytes 8Ψ/N_d
    for r in range(nproc):
        out = res.first(r)
        assert out["world_size"] == nproc and out["params"] == PSI and out["pad"] == lay.pad
        assert out["owned"] == [r * lay.shard, (r + 1) * lay.shard]
        assert out["max_param_diff"] < TOL and out["max_state_diff"] < TOL
        assert out["predicted_optimizer_bytes"] == predicted
        assert out["padding_bytes"] == 8 * lay.pad / nproc
        assert out["optimizer_bytes"] == predicted + 8 * lay.pad / nproc == 8 * lay.shard
        assert out["unsharded_optimizer_bytes"] == 8 * PSI
        assert out["unsharded_optimizer_bytes"] / out["optimizer_bytes"] == pytest.approx(
            nproc, rel=0.01
        )
        assert (
            out["comm_reduce_scatter_bytes"]
            == out["comm_all_gather_bytes"]
            == (nproc - 1) * lay.shard * 4
        )
        assert (
            out["comm_total_bytes"]
            == out["comm_all_reduce_bytes"]
            == 2 * (nproc - 1) * lay.padded * 4 // nproc
        )
    print(f"ch07_zero1 on {nproc} ranks: {res.seconds:.1f} s")


def test_zero1_rejects_uneven_batch():
    with pytest.raises(
        LaunchError, match="global batch B=5 must be divisible by the data-parallel size N=2"
    ):
        launch("ch07_zero1", nproc=2, args=["--batch", "5"], show="none")
