"""Chapter 1's four from-scratch demos (data, tensor, pipeline, sequence parallel) on gloo.

Every demo checks itself against a single-process reference inside each rank and raises when they
disagree; these tests also read what the ranks emit. Ten torchrun launches, ~6-15 s each on a
2-core machine; the in-process tests at the top take well under a second.
"""

import pytest
import torch

from helpers.train.reference import check_close, sig
from helpers.run.launch import LaunchError, launch
from helpers.parallel.pp import bubble_fraction, gpipe_order, split_layers
from helpers.parallel.sp import causal_attention
from helpers.parallel.tp import shard

TOL = 1e-5  # the demos' own fp32 tolerance on the CPU


# ---------------------------------------------------------------- in-process, no torchrun


def test_split_layers_consecutive_equal_stages():
    assert split_layers(4, 2) == [[0, 1], [2, 3]]
    assert split_layers(8, 4) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert split_layers(3, 1) == [[0, 1, 2]]
    assert split_layers(4, 4) == [[0], [1], [2], [3]]


@pytest.mark.parametrize("L, p", [(5, 2), (6, 4), (2, 4)])
def test_split_layers_rejects_uneven(L, p):
    with pytest.raises(ValueError, match=f"cannot split L={L} layers into p={p} pipeline stages"):
        split_layers(L, p)


def test_bubble_fraction_and_order():
    assert bubble_fraction(1, 4) == 0.0
    assert bubble_fraction(2, 4) == pytest.approx(1 / 5)
    assert bubble_fraction(4, 4) == pytest.approx(3 / 7)
    assert bubble_fraction(4, 100) < 0.03  # more micro-batches, smaller bubble
    assert gpipe_order(3) == ["F0", "F1", "F2", "B2", "B1", "B0"]


def test_shard_slices_and_rejects_uneven():
    w = torch.arange(24.0).reshape(4, 6)
    assert torch.equal(shard(w, 0, 1, 2), w[2:])
    assert torch.equal(shard(w, 1, 2, 3), w[:, 4:])
    with pytest.raises(ValueError, match="into 4 equal shards"):
        shard(w, 1, 0, 4)


def test_check_close_names_the_tensor():
    assert check_close("same", torch.ones(3), torch.ones(3)) == 0.0
    with pytest.raises(
        AssertionError, match="W1 shard grad disagrees with the single-process reference"
    ):
        check_close("W1 shard grad", torch.ones(3), torch.ones(3) + 1e-3)
    with pytest.raises(AssertionError, match="shape"):
        check_close("shape", torch.ones(3), torch.ones(1))  # allclose would broadcast; we must not


def test_causal_attention_matches_sdpa():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 5, 3, 4, generator=g) for _ in range(3))  # (b, s, heads, d)
    want = torch.nn.functional.scaled_dot_product_attention(
        *(t.transpose(1, 2) for t in (q, k, v)), is_causal=True
    ).transpose(1, 2)
    torch.testing.assert_close(causal_attention(q, k, v), want)


def test_sig_rounds_to_significant_digits():
    assert sig(0.123456) == 0.1235 and sig(1234.5) == 1234.0 and sig(1.0e-7 / 3) == 3.333e-8


# ---------------------------------------------------------------- torchrun launches


def _same_on_all_ranks(result, key):
    values = [r[key] for r in result.results]
    assert len(values) == result.nproc and all(v == values[0] for v in values), (key, values)
    return values[0]


@pytest.mark.parametrize("nproc", [2, 4])
def test_dp(nproc):
    res = launch("ch01_dp", nproc=nproc, show="none")
    assert len(res.results) == nproc
    for r in res.results:
        assert (
            r["world_size"] == nproc and r["global_batch"] == 8 and r["local_batch"] == 8 // nproc
        )
        assert r["samples"] == [r["rank"] * 8 // nproc, (r["rank"] + 1) * 8 // nproc]
        assert r["max_grad_diff"] < TOL and r["max_param_diff"] < TOL
        assert r["loss"] == pytest.approx(r["ref_loss"], rel=1e-3)
    assert _same_on_all_ranks(res, "loss") == pytest.approx(
        sum(r["loss_local"] for r in res.results) / nproc, rel=1e-3
    )


def test_tp():
    res = launch("ch01_tp", nproc=2, show="none")
    for r in res.results:
        assert (r["hidden"], r["ffn"], r["ffn_per_rank"]) == (8, 32, 16)
        assert r["w1_shard"] == [16, 8] and r["w2_shard"] == [8, 16]
        assert r["columns"] == [16 * r["rank"], 16 * (r["rank"] + 1)]
        assert r["max_out_diff"] < TOL and r["max_grad_diff"] < TOL
        assert set(r["grad_diffs"]) == {"x", "w1", "b1", "w2", "b2"}
    _same_on_all_ranks(res, "loss")


@pytest.mark.parametrize("nproc, layers", [(2, 4), (4, 8)])
def test_pp(nproc, layers):
    res = launch(
        "ch01_pp", nproc=nproc, args=["--layers", str(layers), "--micro", "4"], show="none"
    )
    stages = split_layers(layers, nproc)
    for r in res.results:
        assert r["layers_per_stage"] == layers // nproc
        assert r["layers"] == stages[r["rank"]] and r["stage_layers"] == stages
        assert r["schedule"] == gpipe_order(4)
        assert r["bubble_fraction"] == pytest.approx((nproc - 1) / (4 + nproc - 1), abs=1e-6)
        assert r["max_grad_diff"] < TOL
        assert r["loss"] == pytest.approx(r["ref_loss"], rel=1e-3)
    _same_on_all_ranks(res, "loss")


def test_sp():
    res = launch("ch01_sp", nproc=2, show="none")
    for r in res.results:
        assert (r["seq_len"], r["local_seq"], r["heads"], r["local_heads"]) == (8, 4, 4, 2)
        assert r["x_local_shape"] == [2, 4, 16] and r["heads_shape"] == [2, 8, 2, 4]
        assert r["tokens"] == [4 * r["rank"], 4 * (r["rank"] + 1)]
        assert max(r["max_out_diff"], r["max_x_grad_diff"], r["max_w_grad_diff"]) < TOL
        assert r["loss"] == pytest.approx(r["ref_loss"], rel=1e-3)


@pytest.mark.parametrize(
    "demo, args, message",
    [
        (
            "ch01_dp",
            ["--batch", "7"],
            "global batch B=7 must be divisible by the data-parallel size D=2",
        ),
        (
            "ch01_tp",
            ["--ffn", "33"],
            "MLP width 4h=33 must be divisible by the tensor-parallel size P=2",
        ),
        ("ch01_pp", ["--layers", "3"], "cannot split L=3 layers into p=2 pipeline stages"),
        (
            "ch01_sp",
            ["--heads", "3"],
            "number of heads a=3 must be divisible by the sequence-parallel size P=2",
        ),
    ],
)
def test_bad_sizes_fail_clearly(demo, args, message):
    with pytest.raises(LaunchError) as caught:
        launch(demo, nproc=2, args=args, show="none")
    assert message in str(caught.value)
