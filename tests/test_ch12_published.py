"""Chapter 12's published data, as typed from the papers (helpers.chapters.ch12_published): every
figure is checked against what its own source makes checkable, and the architectures against the
parameter counts the papers state."""

import pytest

from helpers.chapters.ch12_published import (
    DEEPSEEK_V3,
    LLAMA3,
    MEGATRON_TABLE1,
    RUNS,
    SOURCES,
    by_key,
    layout_row,
)
from helpers.cost.hardware import A100_BF16_PEAK, H100_BF16_PEAK, PRESETS


def test_six_trainings_seventeen_layouts_each_with_its_source():
    assert len({r.training for r in RUNS}) == 6 and len(RUNS) == 17
    assert len({r.key for r in RUNS}) == len(RUNS)
    for run in RUNS:
        assert run.source in SOURCES and run.cluster in PRESETS
        assert run.reported or run.counting == "no throughput published", run.key


def test_world_size_is_the_product_of_the_degrees():
    for run in RUNS:
        tp = run.tp or run.assumed["tp"]
        dp = run.dp or run.assumed["dp"]
        assert tp * run.cp * run.pp * dp == run.gpus, run.key


def test_megatron_table1_is_consistent_with_itself():
    """Typed from Narayanan et al. 2021, Table 1: aggregate = per GPU × GPUs, % = per GPU / 312."""
    assert len(MEGATRON_TABLE1) == 10
    for name, heads, h, layers, t, p, n, batch, tflops, pct, agg in MEGATRON_TABLE1:
        assert agg == pytest.approx(tflops * n / 1000, rel=0.01), name
        assert round(100 * tflops * 1e12 / A100_BF16_PEAK) == pytest.approx(pct, abs=1), name
        assert h % heads == 0 and n % (t * p) == 0 and batch % (n // (t * p)) == 0


@pytest.mark.parametrize("row", MEGATRON_TABLE1, ids=lambda r: r[0])
def test_megatron_shapes_have_the_published_parameter_counts(row):
    """Table 1 prints the count to 0.1 B (1.65 B prints as 1.7 B)."""
    run = by_key(f"MEG-{row[0]}")
    assert run.model.exact_params / 1e9 == pytest.approx(float(row[0][:-1]), abs=0.051)


def test_llama3_table4():
    """Typed from Dubey et al. 2024, Table 4: 16M tokens per batch; MFU close to TFLOP/s / peak."""
    for run in LLAMA3:
        assert run.global_batch * run.seq == pytest.approx(16e6, rel=0.05), run.key
        tflops, mfu = run.reported["TFLOP/s per GPU"], run.reported["BF16 MFU %"]
        assert 100 * tflops * 1e12 / H100_BF16_PEAK == pytest.approx(mfu, abs=1)
    assert [r.gpus for r in LLAMA3] == [8192, 16384, 16384]
    assert [r.cp for r in LLAMA3] == [1, 1, 16]
    assert LLAMA3[0].model.params / 1e9 == pytest.approx(405, rel=0.02)


def test_deepseek_v3_dimensions_give_its_parameter_counts():
    """DeepSeek-AI 2024: 671 B total, 37 B activated (§1, §4.2)."""
    m = DEEPSEEK_V3.model
    assert m.params / 1e9 == pytest.approx(DEEPSEEK_V3.reported["total params B"], rel=0.005)
    assert m.active_params / 1e9 == pytest.approx(37, rel=0.02)
    assert DEEPSEEK_V3.tp == 1 and DEEPSEEK_V3.pp == 16 and DEEPSEEK_V3.ep == 64
    assert DEEPSEEK_V3.sharding == "ZeRO-1" and DEEPSEEK_V3.gpus == 2048


def test_bloom_opt_alpaca():
    assert by_key("BLOOM").model.params / 1e9 == pytest.approx(176, rel=0.01)
    assert by_key("OPT").model.params / 1e9 == pytest.approx(175, rel=0.01)
    assert by_key("ALPACA").model.params / 1e9 == pytest.approx(6.7, rel=0.01)
    alpaca = by_key("ALPACA")
    assert alpaca.micro_batch * alpaca.dp * 8 == alpaca.global_batch  # 4 × 4 GPUs × 8 steps


def test_assumptions_are_marked_in_the_table():
    row = layout_row(by_key("OPT"))
    assert row["TP"] == "8*" and row["DP"] == "124*"
    assert layout_row(by_key("L3-8K GPUs"))["TP"] == 8


def test_hardware_presets_carry_the_stated_figures():
    """Datasheet peaks and the per-GPU links the papers give (helpers.cost.hardware docstring)."""
    gb = 1e9
    assert PRESETS["selene"].peak_flops == A100_BF16_PEAK == 312e12
    assert PRESETS["meta-h100"].peak_flops == PRESETS["deepseek-h800"].peak_flops == H100_BF16_PEAK
    assert PRESETS["selene"].inter.bandwidth_bytes_per_s == 25 * gb  # 200 Gb/s HDR per GPU
    assert PRESETS["jean-zay"].inter.bandwidth_bytes_per_s == 4 * 100 / 8 / 8 * gb  # 4 × 100 Gb/s
    assert PRESETS["meta-h100"].inter.bandwidth_bytes_per_s == 400 / 8 * gb  # 400 Gb/s RoCE
    h800 = PRESETS["deepseek-h800"]
    assert (h800.intra.bandwidth_bytes_per_s, h800.inter.bandwidth_bytes_per_s) == (
        160 * gb,
        50 * gb,
    )
    assert all(hw.gpus_per_node == 8 and hw.memory_gib == 80 for hw in PRESETS.values())
