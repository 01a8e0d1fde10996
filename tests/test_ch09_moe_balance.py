"""Chapter 9, MoE all-to-all and balance: dispatch and combine bytes counted against the formula,
the cross-node rule of the cost model, a skewed router balanced by the auxiliary loss and by
DeepSeek-V3's bias on four gloo ranks against a single-process reference, and the MoE memory
model. The launches are the notebook's, so ``make test`` runs each once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from helpers.chapters import ch09_moe as moe_show
from helpers.chapters import ch09_moe_balance as balance
from helpers.chapters.ch09_records import first_rank, recorded
from helpers.cost.comm import NOMINAL_LINKS, Link
from helpers.cost.moe import (
    buffer_slots,
    dispatch_bytes,
    ep_all_to_all_seconds,
    ep_layer_bytes,
    moe_memory,
    ring_all_reduce_seconds,
)
from helpers.figures.moe_all_to_all import cross_node_bandwidth, dispatch_exchange
from helpers.parallel.ep import dropped_at, expert_capacity, imbalance, route, update_bias
from helpers.run.launch import launch


def test_dispatch_formula():
    for tokens, k, experts, phi in ((32, 2, 4, 1.0), (4096, 2, 8, 1.25), (10, 1, 4, 1.25)):
        slots = buffer_slots(tokens, k, experts, phi)
        assert slots == experts * expert_capacity(tokens, experts, k, phi)  # the layer's own C
    # E = 8, 4096 tokens, top-2 of 8, h = 4096, φ = 1.25, bf16: 7/8 · 8 · 1280 · 4096 · 2 bytes
    assert dispatch_bytes(4096, 2, 4096, 8, 8, 1.25, 2) == 7 / 8 * 8 * 1280 * 4096 * 2
    assert dispatch_bytes(4096, 2, 4096, 8, 8, None, 2) == 7 / 8 * 2 * 4096 * 4096 * 2  # dropless
    assert dispatch_bytes(64, 2, 16, 8, 1, 1.0, 4) == 0  # one rank keeps everything
    assert ep_layer_bytes(32, 2, 16, 4, 2, 1.0, 4) == 4 * dispatch_bytes(32, 2, 16, 4, 2, 1.0, 4)


def test_counted_bytes_equal_the_formula():
    results = launch("ch09_moe", 4, ["--experts", "8", "--skew", "3"], show="none").results
    rows = moe_show.bytes_rows(results)
    assert len(rows) == 8 and all(row["equal"] for row in rows)
    for r in results:
        one = dispatch_bytes(r["tokens"], r["k"], r["hidden"], r["experts"], r["ep"],
                             r["capacity_factor"], r["element_size"])  # fmt: skip
        for phase in ("forward", "backward"):
            sent = r["sent"][phase]
            assert r["all_to_alls"][phase] == 2 and sent[r["ep_rank"]] == 0
            assert set(sent) - {0} == {2 * one / (r["ep"] - 1)}  # the same to every peer
            whole = r["experts"] * r["capacity"] * r["hidden"] * r["element_size"]
            assert sum(sent) != 2 * whole  # the piece for itself never leaves the rank


def test_capacity_buffers_grow_as_the_memory_model_says():
    low = launch("ch09_moe", 2, ["--capacity_factor", "2"], show="none").results
    high = launch("ch09_moe", 2, ["--capacity_factor", "4"], show="none").results
    assert not any(r["dropped"] for r in low + high)
    grown = moe_show.saved_growth(low, high)
    assert grown["counted"] == [grown["formula"]] and grown["slots"] == 4 * 32
    per_slot = moe_memory(0, 1, 4, 1, 2, dp=2, ep=2, tokens=32, hidden=16, expert_ffn=32,
                          capacity_factor=4.0, bytes_per_element=4)["capacity_buffers"]  # fmt: skip
    assert per_slot / buffer_slots(32, 2, 4, 4.0) * grown["slots"] == grown["formula"]


def test_all_to_all_never_pools_a_nodes_cards():
    ib, nv = Link("ib", 50e9, 0.0), Link("nv", 450e9, 0.0)
    a2a = ep_all_to_all_seconds(1e9, 16, 8, ib, nv)
    assert a2a["off_node_bytes"] == 0.5e9 and a2a["on_node_bytes"] == 7 / 16 * 1e9
    assert a2a["seconds"] == pytest.approx(0.5e9 / 50e9)  # one card, not eight
    assert ep_all_to_all_seconds(1e9, 8, 8, ib, nv)["off_node_bytes"] == 0  # one node: NVLink
    ring = ring_all_reduce_seconds(1e9, 16, 8, ib, nv)
    assert ring == pytest.approx(2 * 15 / 16 * 1e9 / 400e9)  # eight cards
    bw = cross_node_bandwidth([1, 2, 4, 8])
    assert bw["all_to_all"] == [50.0] * 4 and bw["all_reduce"] == [50.0, 100.0, 200.0, 400.0]
    with pytest.raises(ValueError):
        ep_all_to_all_seconds(1e9, 12, 8, ib, nv)
    x = dispatch_exchange(4, 8)
    assert x["kept"] == [2] * 4 and x["sent"] == [6] * 4
    assert sorted(r for j in x["after"] for _, r in j) == sorted(list(range(4)) * 8)
    assert NOMINAL_LINKS["ib_ndr"].bandwidth_bytes_per_s == 50e9


def test_bias_chooses_but_never_weighs():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    plain = route(logits, k=2, capacity=4)
    biased = route(logits, k=2, capacity=4, bias=torch.tensor([-1.0, 0.0, 0.0, 1.0]))
    assert plain.expert.tolist() == [[0, 1]] and biased.expert.tolist() == [[3, 1]]
    probs = logits.softmax(-1)[0]
    expected = probs[[3, 1]] / probs[[3, 1]].sum()
    assert torch.allclose(biased.gate[0], expected)  # from the probabilities, not the bias
    bias = update_bias(torch.zeros(4), torch.tensor([100, 60, 50, 30]), 1e-3)
    assert bias.tolist() == pytest.approx([-1e-3, 0.0, 1e-3, 1e-3])
    assert imbalance(torch.tensor([30, 10, 10, 10])) == 2.0
    assert dropped_at(torch.tensor([[20, 10], [5, 17]]), 16) == 4 + 1


def test_balancing_on_ranks_equals_one_process():
    results = launch("ch09_moe_balance", 4, [], timeout_s=300, show="none").results
    runs = balance.by_run(results)
    assert [r["method"] for r in runs] == ["none", "aux", "aux", "bias"]
    ref = balance.reference(world=4)
    for row in balance.differences(runs, ref):
        assert all(v for k, v in row.items() if k != "run"), row
    rows = {row["run"]: row for row in balance.summary(runs)}
    none, small, aux, bias = rows.values()
    assert none["max/mean, step 1"] > 2.5 and none["dropped, step 1 (%)"] > 25
    assert none["dropped, last 10 (%)"] > none["dropped, step 1 (%)"]
    assert bias["max/mean, last 10"] < aux["max/mean, last 10"] < small["max/mean, last 10"]
    assert 0 < bias["dropped, last 10 (%)"] < aux["dropped, last 10 (%)"]
    cap = results[0]["capacity"]
    step1 = [g[0] for g in runs[0]["routed"]]
    kept = sum(map(sum, (g[0] for g in runs[0]["kept"])))
    assert dropped_at(torch.tensor(step1), cap) == sum(map(sum, step1)) - kept
    sweep = balance.capacity_sweep(step1, 2, 64, (1, 4))
    assert sweep[0]["C"] == cap and sweep[-1]["dropped (%)"] == 0


def test_moe_memory():
    h, ffn, layers = 4096, 14336, 32
    dense = layers * (2 * h * h + 2 * h * 1024 + 10 * h) + 2 * 32000 * h + h
    m = moe_memory(dense, 3 * h * ffn, 8, layers, 2, dp=64, ep=8)
    assert round(m["total_params"] / 1e9) == 47 and round(m["active_params"] / 1e9) == 13
    assert m["held_params"] == dense + layers * 3 * h * ffn  # one expert per layer of eight
    one = moe_memory(dense, 3 * h * ffn, 8, layers, 2, dp=64, ep=1)
    assert m["optimizer"] == pytest.approx(one["optimizer"])  # ZeRO-1: sharded by D either way
    assert one["weights"] - m["weights"] == pytest.approx(2 * 7 / 8 * 8 * layers * 3 * h * ffn)
    assert one["model_states"] == one["as_dense"] > m["model_states"]
    with pytest.raises(ValueError):
        moe_memory(dense, 1, 8, 1, 2, dp=6, ep=4)
    record = recorded("moe")
    if record is not None:  # the chapter's Mixtral, counted by transformers on the GPU
        r = first_rank(record["runs"][0])
        held = moe_memory(r["params"] - r["expert_params"], 3 * 1024 * 2048, 8, 8, 2, dp=2, ep=2)
        assert held["held_params"] == r["params"] - r["expert_params"] + r["local_expert_params"]


def test_sources_are_quoted_with_their_urls():
    quoted = balance.sources()
    needed = {
        "nic-per-gpu",
        "ring-aggregates-nics",
        "same-in-node-index",
        "ib-vs-nvlink",
        "bias-update",
    }
    assert needed <= set(quoted)
    assert "local NIC" in quoted["nic-per-gpu"]["quote"]
    assert all(len(q["quote"]) > 40 and q["url"].startswith("https://") for q in quoted.values())


def test_the_framework_names_on_the_page_exist():
    from helpers.config.megatron_core import names

    fields = names()["TransformerConfig"]
    page = (Path(__file__).resolve().parents[1] / "book" / "09_quick_demos.md").read_text()
    section = page.split("### Capacity and balancing in the frameworks")[1].split("\n### ")[0]
    named = set(re.findall(r"`(moe_[a-z_]+)", section))
    assert len(named) >= 9 and named <= fields, named - fields
