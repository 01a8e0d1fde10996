"""Chapter 9's GPU records: what the notebook shows and glues for the page comes from the JSON.

The records are ``results/2xNVIDIA-H200/ch09_<part>.json`` (committed); each test reads the raw
JSON, recomputes a number independently of the ``helpers.chapters.ch09_*`` modules where it can, and
checks that the helper, the notebook's stored (glued) table or number, and the page's glue carry it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers.chapters import ch09_numbers
from helpers.chapters.ch09_hybrid_layouts import mfu_of
from helpers.chapters.ch09_nan_study import nan_rows
from helpers.chapters.ch09_sequence_parallel import (
    attention_scores_gib,
    gpu_capacity_gib,
    oom_request_gib,
    sweep_points,
)
from helpers.cost.mfu import H200_BF16_PEAK as PEAK_FLOPS
from helpers.train.presets import PRESETS, flops_per_token
from helpers.record.results import load
from helpers.models.llama import llama_config

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "book" / "09_quick_demos.md").read_text()
NOTEBOOK = json.loads((ROOT / "notebooks" / "09_quick_demos.ipynb").read_text())
KEYS = (
    "ch09-resnet-gpu",
    "ch09-hybrid-gpu",
    "ch09-fig-hybrid",
    "ch09-nan-gpu",
    "ch09-fig-nan",
    "ch09-moe-gpu",
    "ch09-sp-gpu",
    "ch09-fig-sp",
    "ch09-sp-oom",
    "ch09-nan2048-gpu",
)


def glued() -> dict[str, dict]:
    return {
        o["metadata"]["scrapbook"]["name"]: o["data"]
        for c in NOTEBOOK["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if "scrapbook" in o.get("metadata", {})
    }


def html(key: str) -> str:
    text = next(v for k, v in glued()[key].items() if k.endswith("text/html"))
    return "".join(text) if isinstance(text, list) else text


def results(part: str) -> list[tuple[str, list[dict]]]:
    return [(run["name"], run.get("results", [])) for run in load(f"ch09_{part}", gpus=2)["runs"]]


def test_every_gpu_part_is_glued_into_the_page():
    keys = glued()
    for key in KEYS:
        assert key in keys, key
        assert f"```{{glue}} {key}\n:doc: ../notebooks/09_quick_demos.ipynb" in PAGE
    for key in ("ch09-fig-hybrid", "ch09-fig-nan", "ch09-fig-sp"):
        assert "image/png" in keys[key]
    assert "still to be recorded" not in PAGE and "GPU numbers still" not in PAGE


def glued_number(key: str) -> float:
    """A number the notebook glued for the page, as stored (its plain-text repr)."""
    assert f"09_quick_demos.ipynb::{key}:" in PAGE, f"the page does not show {key}"
    data = glued()[key]
    text = next(v for k, v in data.items() if k.endswith("text/plain"))
    return float("".join(text) if isinstance(text, list) else text)


def test_provenance_is_in_the_appendix_not_on_the_page():
    appendix = (ROOT / "book" / "measured" / "ch09.md").read_text()
    for part in ("resnet", "hybrid", "nan", "moe", "sp"):
        p = load(f"ch09_{part}", gpus=2)["provenance"]
        assert p["git_commit"].startswith("2819ef0") and p["hardware"] == "2xNVIDIA-H200"
        assert p["versions"]["colossalai"] == "0.5.0"
        assert f"ch09-provenance-{part}" in glued() and f"ch09-provenance-{part}\n" in appendix
    assert "2819ef0" not in PAGE and "helpers.record ch09" not in PAGE


def test_resnet_accuracies_come_from_the_record():
    accuracies = {name: res[0]["accuracy"] for name, res in results("resnet")}
    assert all(
        res[0]["data"] == "digits" and res[0]["epochs"] == 30 for _, res in results("resnet")
    )
    assert not any(run["cifar10_present"] for run in load("ch09_resnet", gpus=2)["runs"])
    quoted = [f"{100 * a:.2f} %" for a in accuracies.values()]
    assert quoted == ["95.82 %", "96.66 %", "96.94 %", "97.21 %", "97.21 %"]
    for q in quoted:
        assert q in html("ch09-resnet-gpu")
    assert f"{glued_number('ch09-acc-gemini'):.2f} %" == quoted[-1]
    assert [round(a * 359) for a in accuracies.values()] == [
        344,
        347,
        348,
        349,
        349,
    ]  # "347 to 349 right"
    zero, gemini = (res[0]["losses"] for name, res in results("resnet")[3:])
    assert (
        sum(a == b for a, b in zip(zero, gemini)) == 27
        and max(abs(a - b) for a, b in zip(zero, gemini)) < 1.5e-4
    )
    assert glued_number("ch09-zg-equal-epochs") == 27


def test_hybrid_mfu_is_the_books_definition_of_the_slowest_rank():
    page_mfu = {}
    for name, res in results("hybrid"):
        slowest = min((r for r in res if "tokens_per_s" in r), key=lambda r: r["tokens_per_s"])
        config = llama_config(**PRESETS[slowest["preset"]], max_seq=slowest["seq"])
        expected = (
            slowest["tokens_per_s"]
            * flops_per_token(config, slowest["seq"])
            / (slowest["gpus"] * PEAK_FLOPS)
        )
        assert mfu_of(slowest) == pytest.approx(expected)
        assert abs(expected - slowest["mfu"]) < 1e-4  # the recorder's own (rounded) value agrees
        page_mfu[name] = f"{100 * expected:.1f} %"
        assert page_mfu[name] in html("ch09-hybrid-gpu") and f"{slowest['tokens_per_s']:,}" in html(
            "ch09-hybrid-gpu"
        )
        last = next(r for r in res if "losses" in r)
        assert all(x == x for x in last["losses"]) and last["max_diff"] < 0.07
    assert list(page_mfu.values()) == ["26.5 %", "20.7 %", "19.3 %", "19.3 %", "18.8 %", "21.7 %"]
    for key, q in zip(("1gpu", "dp", "tp", "pp", "sg", "a2a"), page_mfu.values()):
        assert f"{glued_number(f'ch09-mfu-{key}'):.1f} %" == q
    one = results("hybrid")[0][1][0]["tokens_per_s"]
    ratios = [
        min(r["tokens_per_s"] for r in res if "tokens_per_s" in r) / one
        for _, res in results("hybrid")[1:]
    ]
    assert (round(min(ratios), 2), round(max(ratios), 2)) == (1.42, 1.64)
    assert glued_number("ch09-speedup-lo") == pytest.approx(min(ratios))


def test_hybrid_peaks_and_bf16_loss_grids():
    peaks = {name: max(r["peak_mib"] for r in res) / 1024 for name, res in results("hybrid")}
    numbers = ch09_numbers.hybrid_numbers(load("ch09_hybrid", gpus=2))
    for key, gib in zip(("1gpu", "dp", "tp", "pp", "sg", "a2a"), peaks.values()):
        assert numbers[f"ch09-peak-{key}-gib"] == gib == glued_number(f"ch09-peak-{key}-gib")
    assert round(peaks["tp=2 + split_gather SP"] - peaks["tp=2"], 1) == 2.9
    by_name = dict(results("hybrid"))
    a2a = next(r for r in by_name["sp=2 all_to_all"] if "losses" in r)["losses"]
    pp = next(r for r in by_name["pp=2 (1F1B, mbs 4)"] if "losses" in r)["losses"]
    assert all(x * 16 == round(x * 16) for x in a2a)  # bf16 at 10: multiples of 1/16
    assert all(
        abs(x * 64 - round(x * 64)) < 64 * 6e-5 for x in pp
    )  # mean of four bf16 losses, 4 decimals


def test_nan_study_stayed_finite():
    for name, res in results("nan"):
        for r in res:
            assert r["finite"] and all(
                w["logits_finite"] and not w["nonfinite_grads"] for w in r["watch"]
            ), name
    repeated = results("nan")[0][1][0]
    assert (repeated["losses"][0], repeated["losses"][-1]) == (10.7901, 0.0043)
    assert repeated["preset"] == "1b" and repeated["seq"] == 1024 and repeated["batch"] == 8
    assert round(repeated["params"] / 1e9, 2) == 0.94 and round(repeated["losses"][11], 3) == 0.037
    assert max(w["logit_absmax"] for w in repeated["watch"]) == 18.0
    assert glued_number("ch09-nan-last") == 0.0043 and "NaN was not reproduced" in PAGE
    assert html("ch09-nan-gpu").count(">none<") == 4


def test_nan_study_at_2048_from_the_record():
    record = load("ch09_nan2048", gpus=2)
    assert record["provenance"]["hardware"] == "2xNVIDIA-H200"
    tp, dp, gathered = record["runs"]
    assert "tp=2" in tp["name"] and "dp=2" in dp["name"] and "gathered" in gathered["name"]
    for run in (tp, dp):  # every rank reported every step, all finite, at the report's length
        assert len(run["results"]) == 2
        for r in run["results"]:
            assert (r["seq"], r["batch"], r["steps"], len(r["losses"])) == (2048, 8, 20, 20)
            assert r["finite"] and all(
                w["logits_finite"] and not w["nonfinite_grads"] for w in r["watch"]
            )
            assert all(x == x for x in r["losses"])
    t, d = tp["results"][0], dp["results"][0]
    assert glued_number("ch09-nan2048-first") == t["losses"][0]
    assert glued_number("ch09-nan2048-last") == t["losses"][-1]
    assert glued_number("ch09-nan2048-step11") == t["losses"][11]
    assert abs(t["losses"][11] - 0.1) < 0.03
    assert glued_number("ch09-nan2048-logit") == max(w["logit_absmax"] for w in t["watch"])
    assert glued_number("ch09-nan2048-dp-last") == d["losses"][-1]
    # tp=2 ran cleanly; dp=2 reported everything, then its launch did not end cleanly;
    # the third was skipped
    assert tp["ok"] and not dp["ok"] and not gathered["ok"] and not gathered["results"]
    assert gathered["error"] == "skipped: the recording's budget was spent"
    error = dp["error"]
    assert len(error) == 3000 and "Traceback" not in error and "Error" not in error
    assert error.rstrip().endswith(
        json.dumps(dp["results"][1]["watch"][-1]) + '], "zero": 0}'
    )  # rank 1's RESULT line
    statuses = [row["status"] for row in nan_rows(record["runs"])]
    assert statuses[0] == "ok" and statuses[2] == "not run: the recording's budget was spent"
    assert (
        statuses[1].startswith("not ok: every rank reported all 20 steps")
        and "no traceback" in statuses[1]
    )
    table = html("ch09-nan2048-gpu")  # the page's table says what the reader needs
    assert "all 20 steps reported" in table and "not ok" not in table and "budget" not in table
    assert table.count(">none<") == 2 and "0.0083" in table and "0.0081" in table
    assert "not ok: every rank reported all 20 steps" in html("ch09-nan2048-status")


def test_moe_numbers():
    (_, ep2), (_, ep1) = results("moe")
    ep2, ep1 = ep2[0], ep1[0]
    assert (ep2["ep"], ep1["ep"]) == (2, 1) and ep2["losses"] == ep1["losses"]
    assert glued_number("ch09-moe-ep2-tokens") == ep2["tokens_per_s"]
    assert glued_number("ch09-moe-speedup") == ep2["tokens_per_s"] / ep1["tokens_per_s"]
    assert glued_number("ch09-moe-ep1-gib") == ep1["peak_mib"] / 1024
    assert round((ep1["peak_mib"] - ep2["peak_mib"]) / 1024, 2) == 0.04
    assert (ep1["local_expert_params"] - ep2["local_expert_params"]) * 4 / 2**30 == 0.75


def test_sp_limits_and_the_failed_allocations():
    swept = [run for run in load("ch09_sp", gpus=2)["runs"] if sweep_points(run)]
    limits = {
        run["name"]: (
            max(p["seq"] for p in run["results"] if not p["oom"]),
            min(p["seq"] for p in run["results"] if p["oom"]),
        )
        for run in swept
    }
    assert list(limits.values()) == [(16384, 32768), (8192, 16384), (8192, 16384)]
    for run in swept:
        for p in run["results"]:
            if p["oom"]:
                heads = PRESETS[p["preset"]]["heads"] // (p["tp"] * p["sp"])
                asked = float(re.search(r"allocate ([\d.]+) GiB", p["error"]).group(1))
                assert heads == 8 and oom_request_gib(p) == asked == attention_scores_gib(
                    p["seq"], heads
                )
    assert gpu_capacity_gib(swept) == 139.8
    ring = load("ch09_sp", gpus=2)["runs"][-1]
    assert not ring["ok"] and "Flash Attention is not installed" in ring["error"]
    assert "Flash Attention is not installed" in PAGE
    assert glued_number("ch09-sp-tp-longest") == 16384
    assert round(glued_number("ch09-sp-tp-16384-gib"), 1) == 127.3
    table = html("ch09-sp-gpu")
    assert "OOM: 8 GiB asked" in table and "OOM: 32 GiB asked" in table
    assert (
        8 * attention_scores_gib(16384, 8, 6) == 96 and 8 * attention_scores_gib(8192, 8, 6) == 24
    )


def test_provenance_says_when_the_code_that_ran_was_not_its_commit(monkeypatch, tmp_path):
    """A tree whose helpers/ differs from HEAD (a device copy with a stale .git, say) is marked,
    and describe() says so; BOOK_GIT_COMMIT (a tree without .git) leaves it unknown."""
    import subprocess

    from helpers.record import results

    repo = tmp_path / "repo"
    (repo / "helpers").mkdir(parents=True)
    (repo / "helpers" / "a.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", "one"], check=True)
    monkeypatch.setattr(results, "RESULTS_DIR", repo / "results")
    monkeypatch.delenv("BOOK_GIT_COMMIT", raising=False)
    assert results._git_dirty() is False
    (repo / "helpers" / "b.py").write_text("y = 2\n")  # code the commit does not have
    assert results._git_dirty() is True
    record = {"provenance": {**results.provenance("cmd"), "git_commit": "abc"}, "runs": []}
    assert "with changes to helpers/ not committed" in results.describe(record)
    monkeypatch.setenv("BOOK_GIT_COMMIT", "abc")
    assert results._git_dirty() is None
