"""Chapter 12's predictions come from the book's models: the step model, the one memory model and
the additions of helpers.cost.practice and helpers.cost.moe; one constant is fitted, on one run."""

from dataclasses import replace

import pytest

from helpers.chapters import ch12_predict as pred
from helpers.chapters.ch12_published import by_key
from helpers.cost.hardware import preset
from helpers.cost.memory_plan import GIB, peak
from helpers.cost.practice import megatron_flops, shares, with_interleaving, with_zero3
from helpers.cost.step_time import plan_layout


def test_epsilon_is_fitted_on_one_run_and_reproduces_it():
    eps = pred.fitted_eta()
    run = by_key(pred.FIT_ON)
    got = pred.predicted_figure(run, eps)
    assert got["predicted"] == pytest.approx(run.reported["TFLOP/s per GPU"], rel=1e-6)
    assert 0.5 < eps < 0.8
    rows = pred.error_rows()
    assert [r["run"] for r in rows if r["fitted here"]] == [pred.FIT_ON]


def test_a_prediction_is_the_step_model_and_the_memory_model():
    eps, run = pred.fitted_eta(), by_key("MEG-145.6B")
    got = pred.predicted_figure(run, eps)
    shape, layout = pred.timed_shape(run), pred.layout_of(run)
    plan = plan_layout(shape, layout, run.global_batch, preset(run.cluster, eps), True)
    assert got["step_s"] == plan.step_s
    flops = megatron_flops(run.model, run.global_batch)
    assert got["predicted"] == pytest.approx(flops / (plan.step_s * run.gpus) / 1e12)
    memory = peak(shape, layout, run.global_batch, True, states_of=pred.states_of(run))
    assert got["memory GiB"] == pytest.approx(memory["total"] / GIB)
    assert sum(shares(plan).values()) == pytest.approx(1.0)


def test_context_parallelism_adds_attention_and_kv_traffic():
    eps, run = pred.fitted_eta(), by_key("L3-16K GPUs, 128K context")
    plan, hw = pred.dense_plan(run, eps)
    bare = plan_layout(pred.timed_shape(run), pred.layout_of(run), run.global_batch, hw, True)
    assert plan.step_s > bare.step_s and plan.compute_s > bare.compute_s
    assert plan.sp_comm_s > 0 and plan.tiers["cp"].startswith("RoCE")
    assert sum(shares(plan).values()) == pytest.approx(1.0)


def test_zero3_and_interleaving():
    eps, run = pred.fitted_eta(), by_key("OPT")
    plan, hw = pred.dense_plan(run, eps)
    assert plan.layout.zero_stage == 2
    with pytest.raises(ValueError, match="ZeRO-2"):
        with_zero3(replace(plan, layout=replace(plan.layout, zero_stage=1)), run.model, hw)
    l3, _ = pred.dense_plan(by_key("L3-16K GPUs"), eps)
    two = with_interleaving(l3, 2)
    assert two.bubble_s == pytest.approx(l3.bubble_s / 2) and two.step_s < l3.step_s


def test_the_page_quotes_the_computed_errors():
    page = " ".join((pred.RUNS and open("book/12_in_practice.md").read()).split())
    rows = {r["run"]: r for r in pred.error_rows()}
    assert f"$\\epsilon$ = {pred.fitted_eta():.3f}" in page
    meg = [abs(r["error %"]) for k, r in rows.items() if k.startswith("MEG") and k != pred.FIT_ON]
    assert f"by {min(meg)} % (529.6 B) to {max(meg)} % (1.7 B)" in page
    assert f"within {rows['BLOOM']['error %']} %" in page
    assert f"gives {rows['BLOOM']['memory GiB (model)']} GiB per GPU" in page
    assert f"over-predicted by {rows['DSV3']['error %']} %" in page
    assert f"over-predicted by {rows['OPT']['error %']} %" in page
    diag = pred.diagnostics()
    assert f"−{abs(diag[3]['error % after'])} %; with 8" in page
    assert f"to −{abs(diag[0]['error % after'])} % and +{diag[1]['error % after']} %" in page
    assert f"stays {round(diag[2]['error % after'])} % high" in page
    assert f"would need {round(diag[5]['model, check applied'])} GiB" in page
    assert "within 34 %" in page and max(meg) < 34


def test_the_efficiency_each_run_would_need():
    page = " ".join(open("book/12_in_practice.md").read().split())
    got = {r["run"]: r["ε it would need"] for r in pred.implied_rows()}
    meg = [v for k, v in got.items() if k.startswith("MEG")]
    assert f"need {min(meg):.2f} to {max(meg):.2f}" in page
    assert f"BLOOM {got['BLOOM']:.2f}, OPT {got['OPT']:.2f}" in page
    assert f"DeepSeek-V3 {got['DSV3']:.2f}" in page
    l3 = [v for k, v in got.items() if k.startswith("L3")]
    assert min(l3) > 1 and f"would need {min(l3):.2f} to {max(l3):.2f}" in page
    assert all(v <= 1 for k, v in got.items() if not k.startswith("L3"))
    assert got[pred.FIT_ON] == round(pred.fitted_eta(), 3)


def test_the_page_quotes_the_computed_shares():
    page = " ".join(open("book/12_in_practice.md").read().split())
    rows = {r["run"]: r for r in pred.error_rows()}
    assert "ep 39%" in rows["DSV3"]["shares"] and "would be 39 % of the step" in page
    bubbles = [
        round(100 * pred.predicted_figure(pred.by_key(k), pred.fitted_eta())["shares"]["bubble"])
        for k in ("L3-8K GPUs", "L3-16K GPUs")
    ]
    assert bubbles == [32, 48] and "= 32 % and 48 % of the step" in page
    l3 = [rows[k]["error %"] for k in rows if k.startswith("L3")]
    assert -50 < min(l3) and max(l3) < -33 and "under-predicted by a third to a half" in page
