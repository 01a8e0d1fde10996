"""Chapters 6 and 8 show the recorded GPU runs (results/<gpus>/ch08_*.json): every glued key is
in the stored notebook, no page still waits for a recording, the decision table's evidence is
computed from the record, and a run with a wrong loss is flagged by code. (The numbers the pages
quote are glued from the notebooks: tests/test_ch08_numbers.py and tests/test_reader_pages.py.)"""

import json
import math
import re
from pathlib import Path

import pytest

from helpers.chapters import ch08_troubleshooting as show
from helpers.chapters.ch06_choice import decision_rows

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
