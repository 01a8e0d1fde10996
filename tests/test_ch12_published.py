"""Chapter 12's published data (helpers.chapters.ch12_published, read from
helpers/data/published_trainings.yaml): every figure carries its source and quote, every derived
figure its arithmetic, every assumption says why; the figures are checked against what their own
sources make checkable, and the architectures against the parameter counts the papers state."""

import pytest

from helpers.chapters.ch12_published import (
    ALPACA,
    BLOOM,
    DEEPSEEK_V3,
    LLAMA3,
    MEGATRON_SCRIPT,
    MEGATRON_TABLE1,
    OPT,
    RUN_FIELDS,
    RUNS,
    SOURCES,
    STATUSES,
    arithmetic,
    by_key,
    figure,
)
from helpers.chapters.ch12_sources import figure_rows, gaps, layout_row, sources_rows
from helpers.cost.hardware import A100_BF16_PEAK, H100_BF16_PEAK, PRESETS


def test_six_trainings_seventeen_layouts_each_with_its_source():
    assert len({r.training for r in RUNS}) == 6 and len(RUNS) == 17
    assert len({r.key for r in RUNS}) == len(RUNS)
    for run in RUNS:
        assert run.source in SOURCES and run.cluster in PRESETS
        assert run.reported, run.key
    assert {row["source"] for row in sources_rows()} == set(SOURCES)


def test_every_published_figure_has_a_source_and_a_quote():
    for run in RUNS:
        for name, fig in run.figures.items():
            assert fig["status"] in STATUSES, (run.key, name)
            assert fig["source"].strip() and fig["quote"].strip(), (run.key, name)


def test_every_derived_figure_shows_arithmetic_that_holds():
    derived = [
        (r.key, n, f) for r in RUNS for n, f in r.figures.items() if f["status"] == "derived"
    ]
    assert len(derived) >= 17  # every run's DP or global batch at least
    for key, name, fig in derived:
        computed, stated = arithmetic(fig["quote"])
        assert computed == stated == fig["value"], (key, name, fig["quote"])


def test_assumed_holds_only_what_no_source_states():
    for run in RUNS:
        assumed = {n: f["value"] for n, f in run.figures.items() if f["status"] == "assumed"}
        assert run.assumed == assumed, run.key
        for name in RUN_FIELDS:  # the Run's fields are the figures' values
            if name in run.figures:
                assert getattr(run, name) == run.figures[name]["value"], (run.key, name)


def test_world_size_is_the_product_of_the_degrees():
    for run in RUNS:
        assert run.tp * run.cp * run.pp * run.dp == run.gpus, run.key


def test_megatron_table1_is_consistent_with_itself():
    """Narayanan et al. 2021, Table 1: aggregate = per GPU × GPUs, % = per GPU / 312."""
    assert len(MEGATRON_TABLE1) == 10
    for name, heads, h, layers, t, p, n, batch, tflops, pct, agg in MEGATRON_TABLE1:
        assert agg == pytest.approx(tflops * n / 1000, rel=0.01), name
        assert round(100 * tflops * 1e12 / A100_BF16_PEAK) == pytest.approx(pct, abs=1), name
        assert h % heads == 0 and n % (t * p) == 0 and batch % (n // (t * p)) == 0


def test_megatron_script_sets_table1_micro_batches_recompute_and_interleaving():
    """The authors' examples/sc21/run_table_1.sh, row by row, against Table 1."""
    runs = [r for r in RUNS if r.source == "MEG"]
    assert [r.micro_batch for r in runs] == [16, 16, 16, 8, 4, 2, 2, 1, 1, 1]
    assert [r.dp for r in runs] == [32, 32, 32, 32, 32, 32, 24, 15, 9, 6]
    assert all(r.recompute == "full" and r.zero_stage == 0 for r in runs)
    interleaved = {r.key: r.chunks for r in runs if r.schedule == "interleaved 1F1B"}
    assert interleaved == {"MEG-76.1B": 3, "MEG-145.6B": 2, "MEG-310.1B": 2, "MEG-529.6B": 3}
    for run in runs:
        script = MEGATRON_SCRIPT[run.key]["values"]
        assert (script["TP"], script["PP"], script["MBS"], script["GBS"]) == (
            run.tp,
            run.pp,
            run.micro_batch,
            run.global_batch,
        )
        assert (script["NLS"], script["HS"], script["NAH"]) == (
            run.model.layers,
            run.model.hidden,
            run.model.heads,
        )
        assert 8 * script["NNODES"] == run.gpus  # SRUN.sh: --ntasks-per-node=8
        extra = MEGATRON_SCRIPT[run.key]["extra"]
        assert "--activations-checkpoint-method uniform" in extra
        if run.key in interleaved:
            per_stage = int(extra.split("--num-layers-per-virtual-pipeline-stage")[1])
            assert run.chunks == run.model.layers // (run.pp * per_stage)
        else:
            assert "virtual" not in extra and run.chunks == 1


@pytest.mark.parametrize("row", MEGATRON_TABLE1, ids=lambda r: r[0])
def test_megatron_shapes_have_the_published_parameter_counts(row):
    """Table 1 prints the count to 0.1 B (1.65 B prints as 1.7 B)."""
    run = by_key(f"MEG-{row[0]}")
    assert run.model.exact_params / 1e9 == pytest.approx(float(row[0][:-1]), abs=0.051)


def test_llama3_table4_and_section_332():
    """Dubey et al. 2024, Table 4: 16M tokens per batch; MFU close to TFLOP/s / peak; §3.3.2."""
    for run in LLAMA3:
        assert run.global_batch * run.seq == pytest.approx(16e6, rel=0.05), run.key
        tflops, mfu = run.reported["TFLOP/s per GPU"], run.reported["BF16 MFU %"]
        assert 100 * tflops * 1e12 / H100_BF16_PEAK == pytest.approx(mfu, abs=1)
        assert run.zero_stage == 3 and run.reshard_after_forward is False
        assert "do not reshard after forward" in figure(run, "reshard_after_forward")["quote"]
    assert [r.gpus for r in LLAMA3] == [8192, 16384, 16384]
    assert [r.cp for r in LLAMA3] == [1, 1, 16]
    assert [r.dp for r in LLAMA3] == [64, 128, 8]  # arXiv v3 for the 128K row
    assert [figure(r, "recompute")["status"] for r in LLAMA3] == ["published"] * 2 + ["assumed"]
    assert all(r.recompute == "none" for r in LLAMA3)
    assert LLAMA3[0].model.params / 1e9 == pytest.approx(405, rel=0.02)


def test_deepseek_v3_routing_is_published_and_dp_derived():
    """DeepSeek-AI 2024: 671 B total, 37 B activated (§4.2); 4 nodes per token (§4.2, §3.2.2)."""
    m = DEEPSEEK_V3.model
    assert m.params / 1e9 == pytest.approx(DEEPSEEK_V3.reported["total params B"], rel=0.005)
    assert m.active_params / 1e9 == pytest.approx(37, rel=0.02)
    assert (DEEPSEEK_V3.tp, DEEPSEEK_V3.pp, DEEPSEEK_V3.ep, DEEPSEEK_V3.gpus) == (1, 16, 64, 2048)
    assert DEEPSEEK_V3.sharding == "ZeRO-1" and DEEPSEEK_V3.zero_stage == 1
    nodes = figure(DEEPSEEK_V3, "nodes per token")
    assert nodes["value"] == 4 and nodes["status"] == "published"
    assert "at most 4 nodes" in nodes["quote"]
    dp = figure(DEEPSEEK_V3, "dp")
    assert dp["status"] == "derived" and arithmetic(dp["quote"]) == (128, 128)
    assert DEEPSEEK_V3.recompute == "selective"


def test_bloom_from_bigscience_files():
    assert BLOOM.model.params / 1e9 == pytest.approx(176, rel=0.01)
    assert BLOOM.reported["TFLOP/s per GPU"] == 150
    assert "~150 TFLOPs per GPU" in figure(BLOOM, "TFLOP/s per GPU")["quote"]
    assert BLOOM.reported["TFLOP/s per GPU, end of epoch 1"] == 149.77
    assert BLOOM.micro_batch == 2 and figure(BLOOM, "micro_batch")["quote"] == "MBS=2"
    assert (BLOOM.tp, BLOOM.pp, BLOOM.dp, BLOOM.global_batch) == (4, 12, 8, 2048)
    assert BLOOM.recompute == "full" and BLOOM.zero_stage == 1


def test_opt_from_metaseq():
    assert OPT.model.params / 1e9 == pytest.approx(175, rel=0.01)
    assert OPT.tp == 8 and figure(OPT, "tp")["status"] == "published"
    assert OPT.zero_stage == 3 and OPT.reshard_after_forward is False
    assert "--no-reshard-after-forward" in figure(OPT, "reshard_after_forward")["quote"]
    assert (OPT.dp, OPT.micro_batch, OPT.global_batch) == (124, 8, 992)
    assert OPT.global_batch * OPT.seq == pytest.approx(2 * 1024 * 1024, rel=0.05)  # Table 1: 2M
    assert "147 TFLOP/s" in figure(OPT, "TFLOP/s per GPU")["quote"]


def test_alpaca_the_run_whose_time_is_published():
    """8 A100 80 GB, 3 hours (release post); the README's reproduction command uses 4 GPUs."""
    assert ALPACA.model.params / 1e9 == pytest.approx(6.7, rel=0.01)
    assert ALPACA.gpus == 8 and ALPACA.reported["hours"] == 3
    assert "3 hours on 8 80GB A100s" in figure(ALPACA, "gpus")["quote"]
    assert figure(ALPACA, "README command GPUs")["quote"] == "torchrun --nproc_per_node=4"
    accumulation = figure(ALPACA, "gradient accumulation")["value"]
    assert ALPACA.micro_batch * ALPACA.dp * accumulation == ALPACA.global_batch == 128
    assert ALPACA.zero_stage == 3 and ALPACA.reshard_after_forward is True


def test_assumptions_are_marked_in_the_table():
    assert layout_row(by_key("OPT"))["TP"] == 8
    assert layout_row(by_key("L3-8K GPUs"))["micro-batch"] == "1*"
    assert layout_row(by_key("L3-8K GPUs"))["TP"] == 8
    rows = figure_rows(by_key("L3-16K GPUs, 128K context"))
    assert {"figure", "value", "status", "source", "quote"} <= set(rows[0])
    assert next(r for r in rows if r["figure"] == "dp")["value"] == 8


def test_hardware_presets_carry_the_stated_figures():
    """Datasheet peaks and the network cards the sources give (helpers.cost.hardware docstring):
    one card per GPU except Jean Zay's four 100 Gb/s Omni-Path links per node."""
    gb = 1e9
    assert PRESETS["selene"].peak_flops == A100_BF16_PEAK == 312e12
    assert PRESETS["meta-h100"].peak_flops == PRESETS["deepseek-h800"].peak_flops == H100_BF16_PEAK
    assert PRESETS["selene"].inter.bandwidth_bytes_per_s == 25 * gb  # 200 Gb/s HDR per GPU
    jz = PRESETS["jean-zay"]
    assert (jz.inter.bandwidth_bytes_per_s, jz.cards_per_node) == (100 / 8 * gb, 4)
    assert PRESETS["meta-h100"].inter.bandwidth_bytes_per_s == 400 / 8 * gb  # 400 Gb/s RoCE
    h800 = PRESETS["deepseek-h800"]
    assert (h800.intra.bandwidth_bytes_per_s, h800.inter.bandwidth_bytes_per_s) == (
        160 * gb,
        50 * gb,
    )
    assert all(hw.gpus_per_node == 8 and hw.memory_gib == 80 for hw in PRESETS.values())


def test_every_named_mechanism_has_its_source_and_quote():
    """helpers/data/model_gaps.yaml: what the sources say where the models miss a figure."""
    entries = gaps()
    assert {e["run"] for e in entries} >= {"MEG-small", "OPT", "ALPACA", "DSV3", "L3"}
    for e in entries:
        assert e["source"].strip() and len(e["quote"].strip()) > 10, e
