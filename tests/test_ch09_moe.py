"""Chapter 9, MoE from scratch: router, capacity, dispatch/combine, and expert parallelism on
gloo."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.run.launch import launch
from helpers.parallel.ep import MoELayer, balance_loss, combine, dispatch, expert_capacity, route


def brute_force(layer: MoELayer, x: torch.Tensor, routing) -> torch.Tensor:
    """Token by token: Σ over kept choices of gate · FFN_e(x)."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j in range(layer.k):
            if routing.kept[t, j]:
                e = routing.expert[t, j]
                out[t] += routing.gate[t, j] * (F.gelu(x[t] @ layer.w_in[e]) @ layer.w_out[e])
    return out


def test_expert_data_grid():
    from helpers.parallel.ep import expert_data_grid

    assert expert_data_grid(4, 2) == (
        [[0, 1], [2, 3]],
        [[0, 2], [1, 3]],
    )  # ep=2 inside dp=2 replicas
    assert expert_data_grid(2, 2) == ([[0, 1]], [[0], [1]])
    with pytest.raises(ValueError):
        expert_data_grid(6, 4)


def test_capacity_formula():
    assert expert_capacity(32, 4, 2, 1.0) == 16  # ceil(1.0 · 2 · 32 / 4)
    assert expert_capacity(10, 4, 1, 1.25) == 4  # ceil(3.125)
    assert expert_capacity(1, 64, 1, 1.0) == 1


def test_router_priority_first_choices_first():
    # three tokens all prefer expert 0, then expert 1; capacity 2 per expert
    logits = torch.tensor([[3.0, 2.0, 0.0], [3.0, 2.0, 0.0], [3.0, 2.0, 0.0]])
    r = route(logits, k=2, capacity=2)
    assert r.expert.tolist() == [[0, 1], [0, 1], [0, 1]]
    assert r.slot.tolist() == [[0, 0], [1, 1], [2, 2]]
    assert r.kept.tolist() == [[True, True], [True, True], [False, False]]
    assert torch.allclose(r.gate.sum(dim=1), torch.ones(3))
    # a second choice never takes a slot a later token's first choice needs
    logits = torch.tensor([[2.0, 3.0], [3.0, 2.0]])
    r = route(logits, k=2, capacity=1)
    assert r.kept.tolist() == [[True, False], [True, False]]


def test_layer_equals_token_by_token_and_drops_past_capacity():
    torch.manual_seed(0)
    x = torch.randn(24, 8)
    for factor in (0.5, 1.0, 4.0):
        layer = MoELayer(8, 16, 4, k=2, capacity_factor=factor)
        out, routing, _ = layer(x)
        torch.testing.assert_close(out, brute_force(layer, x, routing))
        kept = routing.kept_per_expert(4)
        assert int(kept.max()) <= routing.capacity
        assert int(routing.routed_per_expert(4).sum()) == 2 * 24
    assert bool(routing.kept.all())  # factor 4: room for everyone


def test_dispatch_combine_round_trip():
    x = torch.randn(6, 4)
    r = route(torch.randn(6, 3), k=1, capacity=6)
    assert torch.allclose(combine(dispatch(x, r, 3), r), x)  # identity experts, k=1, no drops


def test_balance_loss_is_one_when_balanced():
    logits = torch.zeros(8, 4)
    logits[torch.arange(8), torch.arange(8) % 4] = 5.0  # two tokens per expert, confident
    r = route(logits, k=1, capacity=8)
    assert balance_loss(r).item() == pytest.approx(1.0, abs=0.05)
    skewed = route(torch.tensor([[5.0, 0, 0, 0]] * 8), k=1, capacity=8)
    assert balance_loss(skewed).item() > 3.5  # all on one expert: close to E


@pytest.mark.parametrize(
    "nproc,args", [(2, []), (4, ["--experts", "8", "--skew", "3"]), (4, ["--dp", "2"])]
)
def test_expert_parallel_equals_single_process(nproc, args):
    result = launch("ch09_moe", nproc, args, show="none", timeout_s=180)
    assert len(result.results) == nproc
    experts, dp = result.first()["experts"], result.first()["dp"]
    assert result.first()["ep"] * dp == nproc
    for replica in range(dp):  # each data replica holds every expert exactly once
        owned = sorted(
            e for r in result.results if r["dp_rank"] == replica for e in r["local_experts"]
        )
        assert owned == list(range(experts))
    for r in result.results:
        assert max(r["diffs"].values()) < 1e-4
        assert r["diffs"]["output"] < 1e-5
        assert sum(r["routed"]) == r["k"] * r["tokens"]
        assert max(r["kept"]) <= r["capacity"]
        assert sum(r["routed"]) - sum(r["kept"]) == r["dropped"]
    if "--skew" in args:  # unbalanced tokens: some expert overflows and tokens are dropped
        assert all(r["dropped"] > 0 for r in result.results)
