"""Chapter 9's notebook glue on results shaped like the demos' RESULT lines: the ResNet CPU runs
(table, accuracy check, resume and evaluation lines), the NaN study's loss lines, the distributed
cross-entropy table, and the sequence-parallel out-of-memory table."""

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


def test_accuracy_check_states_and_enforces_the_bound():
    assert resnet_show.accuracy_check(ONE) == "test accuracy ≈93.59 % (≥ 90 % required)"
    with pytest.raises(AssertionError, match="below the required"):
        resnet_show.accuracy_check({"accuracy": 0.85})


def test_resume_and_eval_lines():
    resumed = {"losses": LOSSES[6:], "accuracy": ONE["accuracy"]}
    lines = resnet_show.resume_lines(ONE, resumed)
    assert (
        lines[0]
        == "epochs 7-12, uninterrupted: [≈0.4000, ≈0.3500, ≈0.3000, ≈0.2500, ≈0.2000, ≈0.1500]"
    )
    assert lines[1].startswith("epochs 7-12, resumed:       [≈0.4000")
    assert lines[2].endswith("in accuracy: True")
    drifted = {"losses": LOSSES[6:-1] + [0.16], "accuracy": ONE["accuracy"]}
    assert resnet_show.resume_lines(ONE, drifted)[2].endswith("in accuracy: False")
    assert resnet_show.eval_line({"accuracy": 0.9359}, ONE) == (
        "eval script, model_12.pth: ≈93.59 %; equal to the training script's: True"
    )


def test_nan_loss_lines_show_losses_only_where_reported():
    losses = [10.7778] + [1.0] * 10 + [0.1243] + [0.01] * 7 + [0.0083]
    runs = [
        {"name": "tp=2", "ok": True, "results": [{"losses": losses}]},
        {"name": "gathered", "not_run": "skipped: the recording's budget was spent"},
    ]
    assert nan_show.nan_loss_lines(runs) == [
        "tp=2: 10.7778 -> 0.0083 in 20 steps, step 11: 0.1243, all finite: True",
        "  status: ok",
        "  status: not run: the recording's budget was spent",
    ]


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
    assert nan_show.zero_gradient_line(results) == (
        "target gradient exactly 0 from margin 10 on; exact value there: -1.9e-04"
    )
    with pytest.raises(ValueError, match="never exactly 0"):
        nan_show.zero_gradient_line(results[:1])


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
    assert sp_show.kept_scores_line(8192).endswith("8 layers x 8 heads: 24 GiB per GPU")
    assert sp_show.kept_scores_line(16384).endswith(": 96 GiB per GPU")
