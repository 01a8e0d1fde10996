"""helpers.cost.memory: published figures (ZeRO Fig. 1, the seed, Korthikanti Table 2) and
properties."""

import pytest

from helpers.parallel.layouts import QWEN2_7B, Layout
from helpers.models.shape import ModelShape
from helpers.cost.activations import layer_activations
from helpers.cost.memory import (
    MemoryBreakdown,
    estimate,
    model_states,
    seed_estimate_memory,
    seed_omissions,
)

GB = 1e9


@pytest.mark.parametrize("stage, published", [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_paper_figure_1(stage, published):
    """ZeRO paper (Rajbhandari et al. 2020) Fig. 1: Ψ = 7.5 B, K = 12, N_d = 64, GB = 1e9.

    Hand arithmetic: 16·7.5 = 120; 4·7.5 + 12·7.5/64 = 30 + 1.41 = 31.4;
    2·7.5 + 14·7.5/64 = 15 + 1.64 = 16.6; 16·7.5/64 = 1.875 → 1.9 (the paper rounds to one
    decimal).
    """
    assert round(sum(model_states(7.5e9, "bf16", stage, dp=64)) / GB, 1) == published
    assert round(estimate(7.5e9, dp=64, zero_stage=stage).gb(), 1) == published


def test_fp32_states_are_16_bytes_split_4_4_8():
    assert model_states(1e9, "fp32") == (4e9, 4e9, 8e9)
    assert model_states(1e9, "bf16") == model_states(1e9, "fp16") == (2e9, 2e9, 12e9)
    # fp32 ZeRO-1 over 4: 8Ψ + 8Ψ/4
    assert sum(model_states(1e9, "fp32", 1, dp=4)) == 10e9


def test_seed_estimate_memory():
    """Seed: 7 B × 16 B = 112 GB for one replica; T = 4, P = 2 → 14 GB."""
    assert seed_estimate_memory(7, 1, 1) == pytest.approx(112.0)
    assert seed_estimate_memory(7, 4, 2) == pytest.approx(14.0)
    assert estimate(7e9, tp=4, pp=2).gb() == pytest.approx(
        14.0
    )  # the model agrees without DP or activations


def test_seed_omissions_text_names_what_is_missing():
    text = seed_omissions(
        7, 4, 2, dp=4, zero_stage=1, shape=ModelShape(32, 32, hidden=4096, seq_len=2048)
    )
    assert (
        "14.0 GB" in text and "data-parallel" in text and "activations" in text and "NCCL" in text
    )


def test_korthikanti_table_2_per_layer():
    """Korthikanti et al. 2022 Table 2, s=2048, b=8, h=4096, a=32, t=4 (book/01_dimensions.md).

    sbh = 2048·8·4096 = 67,108,864; 5as/h = 5·32·2048/4096 = 80.
    none:      sbh(34 + 80)            = 114·sbh   = 7.650 GB
    TP:        sbh(10 + 24/4 + 80/4)   = 36·sbh    = 2.416 GB
    TP + SP:   sbh/4 · (34 + 80)       = 28.5·sbh  = 1.913 GB
    + flash:   sbh/4 · 34              = 8.5·sbh   = 0.570 GB
    full recomputation: 2·sbh = 0.134 GB (2sbh/t = 0.034 GB with SP)
    """
    args = (2048, 8, 4096, 32)
    sbh = 2048 * 8 * 4096
    assert layer_activations(*args) == 114 * sbh
    assert round(layer_activations(*args) / GB, 2) == 7.65
    assert round(layer_activations(*args, tp=4) / GB, 2) == 2.42
    assert round(layer_activations(*args, tp=4, sequence_parallel=True) / GB, 2) == 1.91
    assert round(layer_activations(*args, tp=4, sequence_parallel=True, flash=True) / GB, 2) == 0.57
    assert layer_activations(*args, recompute=True) == 2 * sbh
    assert layer_activations(*args, tp=4, sequence_parallel=True, recompute=True) == 2 * sbh / 4


def test_pipeline_first_stage_holds_p_microbatches():
    shape = ModelShape(layers=32, heads=32, hidden=4096, seq_len=2048)
    per_layer = layer_activations(2048, 1, 4096, 32)
    assert estimate(7e9, pp=1, shape=shape).activations == 32 * per_layer
    # 1F1B: L/P layers × P in flight = L layers' worth; fewer micro-batches than stages hold fewer
    assert estimate(7e9, pp=4, shape=shape).activations == 32 * per_layer
    assert estimate(7e9, pp=4, shape=shape, microbatches=2).activations == 16 * per_layer


def test_layout_and_offload_and_overhead():
    layout = Layout(dp=8, tp=4, pp=1, sp_mode="split_gather", microbatch=2, zero_stage=2)
    est = estimate(7.6e9, layout, shape=QWEN2_7B, flash=True, overhead_bytes=2**30)
    assert est.activations == 28 * layer_activations(
        4096, 2, 3584, 28, 4, sequence_parallel=True, flash=True
    )
    assert est.gib("overhead") == 1.0
    off = estimate(7.6e9, layout, shape=QWEN2_7B, flash=True, offload=True)
    assert off.optimizer == 0 and off.cpu_optimizer == est.optimizer
    assert off.total == est.total - est.optimizer - 2**30
    table = est.table()
    assert "total (GPU)" in table and "GiB" in table and "cpu_optimizer" in table
    assert isinstance(est, MemoryBreakdown)


def test_own_sequence_axis_shards_zero_over_dp_times_sp():
    """Colossal-AI applies ZeRO over dp × sp (mixed_dp_group) for all_to_all/ring_attn."""
    shape = ModelShape(layers=4, heads=8, hidden=1024, seq_len=4096)
    ulysses = estimate(1e9, dp=2, sp=4, sp_mode="all_to_all", zero_stage=1, shape=shape)
    assert ulysses.optimizer == 12e9 / 8
    assert ulysses.activations == 4 * layer_activations(4096, 1, 1024, 8) / 4


SHAPE = ModelShape(layers=32, heads=32, hidden=4096, seq_len=2048)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("dp", [1, 2, 64])
def test_higher_zero_stage_never_uses_more(precision, dp):
    totals = [
        estimate(7e9, dp=dp, zero_stage=z, precision=precision, shape=SHAPE).total for z in range(4)
    ]
    assert totals == sorted(totals, reverse=True)


@pytest.mark.parametrize("tp, sp_mode", [(1, None), (4, None), (4, "split_gather")])
@pytest.mark.parametrize("flash", [False, True])
def test_recomputation_never_uses_more(tp, sp_mode, flash):
    kw = dict(tp=tp, sp_mode=sp_mode, shape=SHAPE, micro_batch=4, flash=flash)
    assert estimate(7e9, recompute=True, **kw).total <= estimate(7e9, **kw).total


@pytest.mark.parametrize("sp_mode", [None, "split_gather"])
def test_more_tensor_parallelism_never_uses_more(sp_mode):
    totals = [
        estimate(7e9, tp=t, sp_mode=sp_mode if t > 1 else None, shape=SHAPE, micro_batch=2).total
        for t in (1, 2, 4, 8, 16, 32)
    ]
    assert totals == sorted(totals, reverse=True)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(params=-1), "params must be non-negative"),
        (
            dict(params=1e9, precision="int8"),
            r"unknown precision 'int8'; valid: \['bf16', 'fp16', 'fp32'\]",
        ),
        (dict(params=1e9, zero_stage=4), "ZeRO stage must be 0, 1, 2 or 3"),
        (dict(params=1e9, zero_stage=-1), "ZeRO stage must be 0, 1, 2 or 3"),
        (dict(params=1e9, tp=3, shape=SHAPE), "32 attention heads are not divisible"),
        (dict(params=1e9, tp=0), "tp must be a positive integer"),
        (dict(params=1e9, shape=SHAPE, micro_batch=-2), "micro_batch must be positive"),
        (dict(params=1e9, shape=SHAPE, seq_len=-5), "seq_len must be positive"),
        (dict(params=1e9, overhead_bytes=-1), "overhead_bytes must be non-negative"),
        (dict(params=1e9, sp_mode="ulysses"), "unknown sequence parallelism mode"),
        (dict(params=1e9, pp=3, shape=SHAPE), "32 layers do not split evenly"),
    ],
)
def test_bad_input_raises_clear_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        estimate(**kwargs)
