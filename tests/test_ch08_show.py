"""Chapters 6 and 8 show the recorded GPU runs (results/<gpus>/ch08_*.json): every glued key is
in the stored notebook, no page still waits for a recording, the numbers quoted are the record's,
the decision table's evidence is computed from it, and a run with a wrong loss is flagged by
code."""

import json
import math
import re
from pathlib import Path

import pytest

from helpers.chapters import ch08_troubleshooting as show
from helpers.config.framework_choice import decision_rows

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    "book/06_frameworks.md": "notebooks/06_frameworks.ipynb",
    "book/08_troubleshooting.md": "notebooks/08_troubleshooting.ipynb",
}
RECORDS = {
    part: sorted(ROOT.glob(f"results/*/ch08_{part}.json")) for part in ("compare", "oom", "tune")
}
needs_records = pytest.mark.skipif(not all(RECORDS.values()), reason="no recorded ch08 GPU result")


def _json(part: str) -> dict:
    """The record read straight from its file (not through the helpers under test)."""
    return max(
        (json.loads(p.read_text()) for p in RECORDS[part]), key=lambda r: r["provenance"]["date"]
    )


def _run(part: str, word: str) -> dict:
    return next(r for r in _json(part)["runs"] if word in r.get("name", ""))


def _glued(notebook: Path) -> set[str]:
    nb = json.loads(notebook.read_text())
    return {
        o["metadata"]["scrapbook"]["name"]
        for c in nb["cells"]
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if "scrapbook" in o.get("metadata", {})
    }


@pytest.mark.parametrize("page", PAGES)
def test_every_glue_key_is_in_the_stored_notebook(page):
    text = (ROOT / page).read_text()
    keys = re.findall(r"```\{glue\} (\S+)\n:doc: \.\./(\S+)\n", text)
    inline = [(k, d) for d, k in re.findall(r"\{glue:text\}`\.\./([^:`]+)::([\w-]+)", text)]
    assert keys and all(doc == PAGES[page] for _, doc in keys + inline)
    keys += inline
    missing = {k for k, _ in keys} - _glued(ROOT / PAGES[page])
    assert not missing, f"{page} glues keys its notebook does not store: {missing}"


@pytest.mark.parametrize("page", PAGES)
def test_nothing_left_to_record(page):
    text = (ROOT / page).read_text()
    for phrase in (
        "still to be recorded",
        "to be recorded",
        "Until then",
        "This chapter is an outline",
    ):
        assert phrase not in text, phrase


def test_figures_and_tables_glued():
    assert {"ch06-compare", "ch06-fig-compare", "ch06-decision"} <= _glued(
        ROOT / PAGES["book/06_frameworks.md"]
    )
    assert {
        "ch08-oom-gpu",
        "ch08-fig-oom",
        "ch08-tune",
        "ch08-tune-profile",
        "ch08-fig-tune",
    } <= _glued(ROOT / PAGES["book/08_troubleshooting.md"])


# -- the loss verdict ------------------------------------------------------------------------------
def _results(losses_per_rank, reference):
    return [
        {"rank": k, "losses": losses, "reference": reference}
        for k, losses in enumerate(losses_per_rank)
    ]


def test_verdict_synthetic():
    ref = [10.0, 9.9, 9.8]
    ok = show.loss_verdict(_results([[10.01, 9.91, 9.79, 9.7], [9.99, 9.89, 9.81, 9.6]], ref))
    assert ok["valid"]
    nan = show.loss_verdict(_results([[10.0, float("nan"), 9.8], [10.0, float("nan"), 9.8]], ref))
    assert not nan["valid"] and "step 2" in nan["reason"]
    inf_late = show.loss_verdict(
        _results([[10.0, 9.9, 9.8, float("inf")]], ref)
    )  # after the reference ends
    assert not inf_late["valid"] and "step 4" in inf_late["reason"]
    off = show.loss_verdict(_results([[10.0, 9.9, 10.3], [10.0, 9.9, 10.3]], ref))
    assert not off["valid"] and "departs" in off["reason"]
    # a pipeline's first stage reports no loss: only the last stage's count
    pipe = show.loss_verdict(_results([[None, None, None], [10.0, 9.9, 9.8]], ref))
    assert pipe["valid"]
    assert show.loss_verdict(_results([[5.0, 4.0]], []))["valid"]  # finite, no reference


@needs_records
def test_verdict_on_the_record():
    record = _json("compare")
    verdicts = {r["name"]: show.loss_verdict(r["results"]) for r in record["runs"] if "name" in r}
    gemini = next(k for k in verdicts if "Gemini" in k)
    assert not verdicts[gemini]["valid"] and "step 3" in verdicts[gemini]["reason"]
    assert all(v["valid"] for k, v in verdicts.items() if k != gemini)
    losses = _run("compare", "Gemini")["results"][0]["losses"]
    assert all(math.isfinite(x) for x in losses[:2]) and not any(
        math.isfinite(x) for x in losses[2:]
    )
    table = {r["run"]: r["valid"] for r in show.rows("compare")}
    assert table[gemini].startswith("NO") and all(
        v == "yes" for k, v in table.items() if k != gemini
    )
    for part in ("tune", "oom"):
        assert all(p["valid"] for p in show.points(part) if not p.get("oom"))


# -- the decision table cites the record -----------------------------------------------------------
@needs_records
def test_decision_evidence_is_the_records():
    rows = decision_rows()
    fsdp, zero = (
        _run("compare", "FSDP2")["results"][0],
        _run("compare", "LowLevelZero")["results"][0],
    )
    tp, gemini = _run("compare", "tp=2")["results"][0], _run("compare", "Gemini")["results"][0]
    assert (
        f"MFU {100 * fsdp['mfu']:.1f} %" in rows[0]["evidence"]
        and f"MFU {100 * zero['mfu']:.1f} %" in rows[0]["evidence"]
    )
    assert f"{zero['tokens_per_s'] / fsdp['tokens_per_s']:.2f}× FSDP2" in rows[0]["evidence"]
    assert (
        f"MFU {100 * gemini['mfu']:.1f} %" in rows[1]["evidence"]
        and "INVALID" in rows[1]["evidence"]
    )
    assert f"MFU {100 * tp['mfu']:.1f} %" in rows[2]["evidence"]
    assert f"{tp['tokens_per_s'] / zero['tokens_per_s']:.2f}× ZeRO-2" in rows[2]["evidence"]
    assert rows[-1]["evidence"].endswith(f"MFU {100 * fsdp['mfu']:.1f} %")
    assert sum("INVALID" in r["evidence"] for r in rows) == 1


def test_decision_evidence_synthetic():
    def p(name, tps, mfu, valid=True):
        return {
            "name": name,
            "tokens_per_s": tps,
            "mfu": mfu,
            "valid": valid,
            "failed": False,
            "oom": False,
            "reason": "ok" if valid else "loss not finite from step 2 on",
        }

    rows = decision_rows(
        [p("FSDP2", 1000, 0.1), p("LowLevelZero", 1500, 0.15), p("Gemini", 9000, 0.9, False)]
    )
    assert "not recorded" in rows[2]["evidence"]  # no tp=2 run
    assert "MFU 10.0 %" in rows[0]["evidence"] and "1.50× FSDP2" in rows[0]["evidence"]
    assert "INVALID (loss not finite from step 2 on)" in rows[1]["evidence"]
    assert all("not recorded" in r["evidence"] for r in decision_rows([])[:3])


# -- numbers quoted on the pages -------------------------------------------------------------------
def _quoted(page: str, texts: list[str]):
    text = " ".join((ROOT / page).read_text().split())  # line breaks of the page do not matter
    missing = [t for t in texts if " ".join(t.split()) not in text]
    assert not missing, f"{page} does not quote {missing}"


@needs_records
def test_chapter6_quotes_the_record():
    r = {w: _run("compare", w)["results"][0] for w in ("FSDP2", "LowLevelZero", "tp=2", "Gemini")}
    texts = [f"{x['tokens_per_s']:,} tokens/s" for x in r.values()] + [
        f"MFU {100 * x['mfu']:.1f} %" for x in r.values()
    ]
    texts.append(f"{r['LowLevelZero']['tokens_per_s'] / r['FSDP2']['tokens_per_s']:.2f} times")
    g = [x["results"] for x in [_run("compare", "Gemini")]][0]
    mean = [round((a + b) / 2, 3) for a, b in zip(g[0]["losses"][:2], g[1]["losses"][:2])]
    texts.append(f"{mean[0]:.3f}, {mean[1]:.3f}, then NaN")
    texts.append("reference reads " + ", ".join(f"{x:.3f}" for x in g[0]["reference"]))
    assert _json("compare")["runs"][0]["info"]["deepspeed_importable"] is False
    texts.append("`deepspeed_importable: false`")
    _quoted("book/06_frameworks.md", texts)


@needs_records
def test_chapter6_exercise_six_arithmetic():
    fsdp = _run("compare", "FSDP2")["results"][0]
    flops = fsdp["mfu"] * 2 * 989.5e12 / fsdp["tokens_per_s"]
    attention = 12 * 16 * 2048 * 2048
    n = (flops - attention) / 6
    assert f"{flops / 1e9:.2f}" == "6.06" and f"{attention / 1e9:.2f}" == "0.81"
    assert abs(n - (fsdp["params"] - 32000 * 2048)) / n < 0.01
    _quoted("book/06_frameworks.md", ["6.06 GFLOP", "0.81 GFLOP", "0.875 B", "65.5 M"])


@needs_records
def test_chapter8_quotes_the_record():
    oom = {r["name"]: r["results"] for r in _json("oom")["runs"] if "name" in r}
    info = _json("oom")["runs"][0]["info"]
    before = next(v for k, v in oom.items() if "no cap" in k)
    capped = next(v for k, v in oom.items() if k.startswith("before") and "capped" in k)
    zero, recompute = (
        next(v for k, v in oom.items() if k.startswith(w)) for w in ("fix 1", "fix 2")
    )
    assert all(x["oom"] for x in capped) and not any(x["oom"] for x in zero + recompute + before)
    texts = [
        f"{round(before[0]['peak_mib']):,} MiB",
        f"{round(before[1]['peak_mib']):,} MiB",
        f"{round(zero[0]['peak_mib']):,} MiB",
        f"{round(recompute[0]['peak_mib']):,} MiB",
        f"{before[0]['tokens_per_s']:,} tokens/s",
        f"ZeRO-2 at {zero[0]['tokens_per_s']:,}",
        f"recomputation at {recompute[0]['tokens_per_s']:,}",
        f"({zero[0]['tokens_per_s'] / before[0]['tokens_per_s']:.2f} of it",
        f"({recompute[0]['tokens_per_s'] / before[0]['tokens_per_s']:.2f}:",
        f"{info['cap_gib']} GiB",
        f"{round(zero[0]['reserved_mib']):,} MiB",
        f"{round(info['cap_gib'] * 1024):,} MiB",
    ]
    assert max(x["reserved_mib"] for x in zero) < info["cap_gib"] * 1024
    tune = [r["results"] for r in _json("tune")["runs"] if "name" in r]
    mfus = [f"{100 * res[0]['mfu']:.2f} %" for res in tune]
    texts.append("MFU went " + " → ".join(mfus[:5]))
    texts += [
        f"then {mfus[5]} and {mfus[6]}",
        f"{tune[0][0]['tokens_per_s']:,} → {tune[1][0]['tokens_per_s']:,} tokens/s",
    ]
    texts += [f"{res[0]['tokens_per_s']:,} tokens/s" for res in tune[2:5]] + [
        f"{tune[5][0]['tokens_per_s']:,} tokens/s"
    ]
    ratios = [tune[k + 1][0]["tokens_per_s"] / tune[k][0]["tokens_per_s"] for k in range(6)]
    assert [f"{x:.2f}" for x in ratios[1:4]] == ["4.16", "1.17", "1.49"]
    texts += ["4.2 times", "gained 17 %", "gained 49 %", "2.7 times", "4 % below"]
    prof = [[x["profile"] for x in res] for res in tune]
    assert (
        round(prof[1][0]["compute_ms"]) == 37
        and round(1000 * tune[1][0]["seconds_per_step"]) == 223
    )
    assert (
        round(prof[2][0]["compute_ms"]) == 103
        and round(1000 * tune[2][0]["seconds_per_step"]) == 215
    )
    assert round(prof[0][0]["compute_ms"] + prof[0][0]["exposed_comm_ms"]) == 307
    assert f"{prof[4][0]['comm_share']:.0%}" == "63%" and f"{prof[4][1]['comm_share']:.0%}" == "6%"
    texts += [
        "37 ms of a 223 ms step",
        "103 ms of compute in a 215 ms",
        "307 ms",
        "rank 0 shows 63 %",
    ]
    _quoted("book/08_troubleshooting.md", texts)
