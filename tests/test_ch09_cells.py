"""Chapter 9's notebook glue on results shaped like the demos' result lines: the ResNet CPU runs'
table, a NaN-study run read for the page, the distributed cross-entropy table and its first lost
gradient, and the sequence-parallel out-of-memory table with the scores eager attention keeps."""

import pytest

from helpers.chapters import ch09_nan_study as nan_show
from helpers.chapters import ch09_resnet as resnet_show
from helpers.chapters import ch09_sequence_parallel as sp_show

LOSSES = [2.0, 1.5, 1.0, 0.8, 0.6, 0.5, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15]
ONE = {"world_size": 1, "lr": 0.1, "milestones": [6], "losses": LOSSES, "accuracy": 0.9359}
TWO = {**ONE, "world_size": 2, "lr": 0.2, "accuracy": 0.9582}


def test_cpu_rows_scale_the_batch_with_the_processes():
    one, two = resnet_show.cpu_rows((ONE, TWO), 1438)
    assert (one["global batch"], one["steps per epoch"]) == (100, 14)
    assert (two["global batch"], two["steps per epoch"]) == (200, 7)
    assert two["loss epoch 1 → 12"] == "≈2.000 → ≈0.150"
    assert one["test accuracy"] == "≈93.59 %" and two["learning rate"] == 0.2


def test_nan_study_reads_a_run_and_the_reader_status():
    from helpers.chapters.ch09_numbers import nan_study

    losses = [10.7778] + [1.0] * 10 + [0.1243] + [0.01] * 7 + [0.0083]
    watch = [{"logit_absmax": 17.5}, {"logit_absmax": 12.0}]
    study = nan_study({"name": "tp=2", "results": [{"losses": losses, "watch": watch}]})
    assert (study["first"], study["last"], study["step11"]) == (10.7778, 0.0083, 0.1243)
    assert study["finite"] and study["steps"] == 20 and study["max_logit"] == 17.5
    assert nan_study({"name": "x", "not_run": "skipped"})["losses"] is None
    assert (
        nan_study({"name": "y", "results": [{"losses": [1.0, float("nan")] * 6}]})["finite"]
        is False
    )
    long = "not ok: every rank reported all 20 steps, then the launch did not end cleanly (x)"
    assert nan_show.reader_status(long) == (
        "all 20 steps reported, then the launch did not end cleanly"
    )
    assert nan_show.reader_status("not run: the recording's budget was spent") == "not run"
    assert nan_show.reader_status("ok") == "ok"


def _ce(margin, colossal, exact):
    return {
        "margin": margin,
        "loss_exact": 1e-3,
        "loss_colossal": 0.0,
        "target_grad_exact": [exact],
        "target_grad_colossal": [colossal],
        "target_grad_torch_bf16": [colossal],
        "other_grad_sum_colossal": [-colossal + 1e-3],
    }


def test_dist_ce_rows_and_the_first_lost_gradient():
    results = [_ce(6.0, -1.5e-2, -1.5e-2), _ce(10.0, 0.0, -1.9e-4), _ce(14.0, 0.0, -3.5e-6)]
    rows = nan_show.dist_ce_rows(results)
    assert [r["margin"] for r in rows] == [6, 10, 14]
    assert (
        rows[1]["target grad exact"] == "-1.90e-04" and rows[0]["Σ grad Colossal-AI"] == "1.0e-03"
    )
    lost = nan_show.first_zero_gradient(results)
    assert (lost["margin"], lost["exact_grad"]) == (10.0, -1.9e-4)
    with pytest.raises(ValueError, match="never exactly 0"):
        nan_show.first_zero_gradient(results[:1])


def test_sp_oom_rows_and_the_kept_scores():
    error = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139 GiB"
    points = [
        {"seq": 4096, "oom": False, "preset": "half", "tp": 2, "sp": 1},
        {"seq": 8192, "oom": True, "preset": "half", "tp": 2, "sp": 1, "error": error},
    ]
    [row] = sp_show.sp_oom_rows([{"name": "tp=2", "results": points}])
    assert row == {
        "layout": "tp=2",
        "sequence": "8,192",
        "heads per GPU": 8,
        "fp32 scores, 1 layer (GiB)": "2.00",
        "allocation that failed (GiB)": "2.00",
    }
    assert sp_show.kept_scores_gib(8192) == 24 and sp_show.kept_scores_gib(16384) == 96
