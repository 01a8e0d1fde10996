"""Chapter 9's display helpers on records shaped like the demos' RESULT lines, and the legacy
launcher."""

from __future__ import annotations

from helpers.chapters.ch09_hybrid_layouts import hybrid_bars, hybrid_rows, mfu_of
from helpers.chapters.ch09_legacy_launch import legacy_launch
from helpers.chapters.ch09_moe import moe_rows
from helpers.chapters.ch09_nan_study import loss_curves, nan_rows
from helpers.chapters.ch09_records import provenance, recorded, run_status
from helpers.chapters.ch09_resnet import resnet_rows, seed_reference
from helpers.chapters.ch09_sequence_parallel import (
    attention_scores_gib,
    gpu_capacity_gib,
    oom_request_gib,
    sp_point_rows,
    sp_rows,
    sweeps,
)
from helpers.figures.ch09_hybrid import hybrid_figure, nan_figure
from helpers.figures.ch09_moe import moe_load_figure
from helpers.figures.ch09_sequence import sp_figure

HYBRID = {
    "name": "tp=2",
    "ok": True,
    "results": [
        {
            "rank": 0,
            "gpus": 2,
            "tokens_per_s": 123456,
            "mfu": 0.3012,
            "peak_mib": 40960.0,
            "losses": [10.5, 9.0, 8.0],
            "reference": [10.5, 9.01],
            "max_diff": 0.01,
            "watch": [],
        },
        {"rank": 1, "gpus": 2, "tokens_per_s": 123456, "mfu": 0.3012, "peak_mib": 40000.0},
    ],
}
FAILED = {
    "name": "gemini",
    "ok": False,
    "error": "Traceback ...\nRuntimeError: no\n",
    "results": [],
}


def test_hybrid_and_failed_rows():
    rows = hybrid_rows([HYBRID, FAILED])
    assert rows[0]["MFU"] == "30.1 %" and rows[0]["peak GiB (largest rank)"] == "40.0"
    assert rows[0]["tokens/s (slowest rank)"] == "123,456"
    assert rows[0]["loss first→last"] == "10.500→8.000"
    assert rows[1]["tokens/s"] == "failed: RuntimeError: no"


def test_hybrid_rows_take_the_slowest_rank_and_the_largest_peak():
    fast, slow = (
        dict(HYBRID["results"][0]),
        dict(HYBRID["results"][1], tokens_per_s=100_000, mfu=0.2440),
    )
    slow["peak_mib"] = 50 * 1024.0
    row = hybrid_rows([{"name": "tp=2", "ok": True, "results": [fast, slow]}])[0]
    assert (
        row["tokens/s (slowest rank)"] == "100,000"
        and row["MFU"] == "24.4 %"
        and row["peak GiB (largest rank)"] == "50.0"
    )
    bars = hybrid_bars([{"name": "tp=2", "ok": True, "results": [fast, slow]}, FAILED])
    assert bars == [{"name": "tp=2", "gpus": 2, "tokens_per_s": 100_000, "mfu": 0.2440}]
    hybrid_figure(bars)


def test_mfu_of_recomputes_the_books_definition():
    from helpers.train.presets import PRESETS, mfu
    from helpers.models.llama import llama_config

    result = {"preset": "half", "seq": 1024, "tokens_per_s": 100_000, "gpus": 2, "mfu": 0.0}
    assert mfu_of(result) == mfu(llama_config(**PRESETS["half"], max_seq=1024), 1024, 100_000, 2)
    assert round(100 * mfu_of(result), 1) == 15.3  # 3.02 GFLOP/token x 1e5 / (2 x 989.5 TFLOP/s)


def test_nan_rows_find_the_first_bad_step():
    nan = float("nan")
    watch = [
        {
            "step": k,
            "loss": x,
            "logits_finite": True,
            "grad_norm": 1.0,
            "logit_absmax": 30.0 + k,
            "nonfinite_grads": ["w"] if k == 3 else [],
        }
        for k, x in enumerate([5.0, 1.0, 0.1, nan])
    ]
    run = {
        "name": "tp=2 repeated",
        "ok": True,
        "results": [{"losses": [5.0, 1.0, 0.1, nan], "watch": watch}],
    }
    row = nan_rows([run])[0]
    assert (
        row["first non-finite step"] == 3
        and row["non-finite gradients"] == "w"
        and row["max |logit|"] == "33"
    )


def test_run_status_says_what_the_record_says():
    watch = [
        {
            "step": k,
            "loss": 1.0,
            "logits_finite": True,
            "grad_norm": 1.0,
            "logit_absmax": 5.0,
            "nonfinite_grads": [],
        }
        for k in range(3)
    ]
    ranks = [{"rank": r, "losses": [3.0, 2.0, 1.0], "steps": 3, "watch": watch} for r in range(2)]
    tail = 'end of a RESULT line ..., "steps": 3, "tokens_per_s": 1, "watch": [], "zero": 0}'
    cut = {"name": "dp=2", "gpus": 2, "ok": False, "error": tail, "results": ranks}
    skipped = {
        "name": "gathered",
        "gpus": 2,
        "ok": False,
        "error": "skipped: the recording's budget was spent",
        "results": [],
    }
    crashed = {
        "name": "crash",
        "gpus": 2,
        "ok": False,
        "error": "Traceback ...\nRuntimeError: boom",
        "results": ranks[:1],
    }
    traced = {**cut, "error": "Traceback ...\nRuntimeError: late"}
    assert run_status({"name": "tp=2", "ok": True, "results": ranks}) == "ok"
    assert run_status(skipped) == "not run: the recording's budget was spent"
    assert run_status(cut) == (
        "not ok: every rank reported all 3 steps, then the launch did not end cleanly "
        "(stored error text: the end of a rank's RESULT line, no traceback)"
    )
    assert run_status(traced).endswith("(stored error text: failed: RuntimeError: late)")
    assert (
        run_status(crashed) == "failed: RuntimeError: boom"
    )  # one rank of two reported: not complete
    rows = nan_rows([cut, skipped])
    assert rows[0]["status"].startswith("not ok: every rank reported all 3 steps")
    assert (
        rows[0]["loss at steps 0/5/10/last"] == "3 / 1"
        and rows[0]["first non-finite step"] == "none"
    )
    assert rows[1] == {"run": "gathered", "status": "not run: the recording's budget was spent"}
    timed_out = {
        **cut,
        "failure": "timeout",
        "timeout_s": 38.5,
        "failed_rank": None,
        "returncode": None,
    }
    assert run_status(timed_out) == (
        "not ok: every rank reported all 3 steps, then the launch was killed at its 38.5 s timeout"
    )
    exited = {**cut, "failure": "exit", "failed_rank": 1, "returncode": 1}
    assert run_status(exited).endswith("steps, then rank 1 exited with code 1")


def test_nan_figure_panels_keep_a_variant_colour():
    a = {
        "name": "tp=2 repeated",
        "args": ["--tp", "2", "--repeat"],
        "results": [{"losses": [5.0, 1.0]}],
    }
    b = {"name": "dp=2 repeated", "args": ["--repeat"], "results": [{"losses": [5.0, 0.9]}]}
    a2 = {**a, "name": "tp=2 repeated, seq 2048"}
    skipped = {
        "name": "gathered",
        "args": ["--tp", "2", "--repeat", "--parallel_output", "0"],
        "results": [],
    }
    assert loss_curves([skipped]) == [{"name": "gathered", "args": skipped["args"], "losses": []}]
    fig = nan_figure(loss_curves([a, b]), loss_curves([b, a2, skipped]), titles=("1,024", "2,048"))
    left, right = fig.axes

    def colour(ax, name):
        return next(ln.get_color() for ln in ax.get_lines() if ln.get_label() == name)

    assert colour(left, "tp=2 repeated") == colour(right, "tp=2 repeated, seq 2048")
    assert colour(left, "dp=2 repeated") == colour(right, "dp=2 repeated")
    assert "gathered" not in [ln.get_label() for ln in right.get_lines()]  # no losses, not drawn
    assert (left.get_title(), right.get_title()) == ("1,024", "2,048")


def test_sp_rows_and_figure():
    points = [
        {"seq": 2048, "oom": False, "peak_mib": 1024.0, "tokens_per_s": 100},
        {"seq": 4096, "oom": False, "peak_mib": 4096.0, "tokens_per_s": 90},
        {"seq": 8192, "oom": True, "peak_mib": 9e4},
    ]
    runs = [{"name": "tp=2", "ok": True, "results": points}, {"name": "ring", **FAILED}]
    rows = sp_rows(runs)
    assert (
        rows[0]["longest sequence that ran"] == "4,096" and rows[0]["out of memory at"] == "8,192"
    )
    assert rows[0]["tokens/s at the longest"] == "90" and rows[1]["out of memory at"].startswith(
        "failed"
    )
    assert [s["points"] for s in sweeps(runs)] == [points, []]  # a failed run: no points
    sp_figure(sweeps(runs), gpu_capacity_gib(runs))
    oom = {
        "seq": 16384,
        "oom": True,
        "peak_mib": 9e4,
        "error": "CUDA out of memory. Tried to allocate 8.00 GiB. "
        "GPU 0 has a total capacity of 139.80 GiB of which",
    }
    runs = [{"name": "tp=2", "ok": True, "results": points[:2] + [oom]}]
    assert oom_request_gib(oom) == 8.0 == attention_scores_gib(16384, 8)
    assert gpu_capacity_gib(runs) == 139.8
    table = sp_point_rows(runs)
    assert [r["sequence"] for r in table] == ["2,048", "4,096", "16,384"]
    assert (
        table[0]["tp=2"] == "1.0 GiB, 100 tokens/s"
        and table[2]["tp=2"] == "OOM: 8 GiB asked, 87.9 GiB held"
    )
    sp_figure(sweeps(runs), gpu_capacity_gib(runs))


def test_nan_figure_marks_non_finite_steps():
    nan = float("nan")
    runs = [
        {"name": "a", "results": [{"losses": [5.0, 1.0, nan]}]},
        {"name": "b", "results": [{"losses": [5.0, 0.1]}]},
    ]
    (ax,) = nan_figure(loss_curves(runs)).axes
    crosses = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert [list(ln.get_xdata()) for ln in crosses] == [[2], []]  # the NaN of run a, at step 2


def test_resnet_and_moe_rows():
    resnet = {
        "name": "2 GPUs, torch_ddp",
        "ok": True,
        "results": [
            {
                "accuracy": 0.9554,
                "data": "digits",
                "epochs": 30,
                "images_per_s": 5000,
                "peak_mib": 30.0,
                "sync_batchnorm": True,
            }
        ],
    }
    row = resnet_rows([resnet])[0]
    assert (
        row["test accuracy"] == "95.54 %"
        and row["Colossal-AI, CIFAR-10, 80 epochs (reference only)"] == ""
    )
    gemini = {**resnet["results"][0], "plugin": "gemini", "world_size": 2}
    assert (
        seed_reference(gemini) == 84.60
        and seed_reference({"world_size": 1, "plugin": "torch_ddp"}) == 85.85
    )
    moe = {
        "name": "ep=2",
        "ok": True,
        "results": [
            {
                "ep": 2,
                "moe_dp": 1,
                "zero": 1,
                "local_expert_params": 2e8,
                "expert_params": 4e8,
                "tokens_per_s": 1000,
                "peak_mib": 2048,
                "losses": [10.4, 9.0],
                "max_diff": 0.02,
            }
        ],
    }
    assert moe_rows([moe])[0]["expert params held / total"] == "200 M / 400 M"


def test_moe_load_figure():
    results = [
        {
            "rank": r,
            "experts": 4,
            "capacity": 16,
            "routed": [10, 20, 15, 19],
            "local_experts": [2 * r, 2 * r + 1],
        }
        for r in range(2)
    ]
    moe_load_figure(results)


def test_legacy_launcher_rejects_ipv4_and_accepts_ipv6():
    assert legacy_launch("127.0.0.1") == "ValueError: An IPv4 address cannot be in brackets"
    assert legacy_launch("::1") == "initialised"


def test_unrecorded_part_says_how_to_record():
    assert "python -m helpers.record ch09 --record --only nothing" in provenance("nothing")


def test_quick_record_stands_in_for_a_missing_part(tmp_path, monkeypatch):
    import json

    from helpers.record import results

    folder = tmp_path / "2xFAKE"
    folder.mkdir()
    record = {
        "provenance": {
            "hardware": "2xFAKE",
            "date": "2026-11-30 08:00 UTC",
            "command": "c",
            "git_commit": "abc",
            "versions": {"torch": "t", "cuda": "c", "colossalai": "0.5.0", "transformers": "4"},
        },
        "runs": [
            {"name": "tp=2 (tiny)", "part": "hybrid", **HYBRID},
            {"name": "x", "part": "sp", "results": []},
        ],
    }
    (folder / "ch09_quick.json").write_text(json.dumps(record))
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    got = recorded("hybrid")
    assert got["quick"] and [r["part"] for r in got["runs"]] == ["hybrid"]
    assert provenance("hybrid").startswith("Only the quick smoke recording")
    assert recorded("moe") is None
