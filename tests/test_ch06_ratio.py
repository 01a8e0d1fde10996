"""Chapter 6's ZeRO-2 / FSDP2 ratio beside Chapter 8's parity (helpers.chapters.ch06_frameworks
.ratio_rows, .equal_rows): computed from the records, shown after the equal-knob comparison, and
cited so by the decision table."""

from pathlib import Path

import pytest

from helpers.chapters import ch06_frameworks as show
from helpers.chapters.ch06_choice import decision_rows

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "book" / "06_frameworks.md"


def _result(tokens_per_s, micro_batch, optimizer, exposed):
    return {
        "tokens_per_s": tokens_per_s,
        "gpus": 2,
        "micro_batch": micro_batch,
        "optimizer": optimizer,
        "profile": {"exposed_comm_ms": exposed},
    }


def _run(name, *args, ok=True):
    return {"name": name, "ok": ok, "results": [_result(*args)]}


def test_ratio_rows_from_synthetic_records():
    name, fsdp, zero, _ = show.PAIRS[0]
    h2h, hf, hz, _ = show.PAIRS[3]
    records = {
        name: {"runs": [_run(fsdp, 1000, 4, "a", 10.0), _run(zero, 1270, 4, "b", 20.0)]},
        h2h: {
            "runs": [
                _run(f"{hf} · round 1", 2000, 16, "c", 1.0),
                _run(f"{hz} · round 1", 2010, 16, "c", 3.0),
                _run(f"{hf} · round 2", 2020, 16, "c", 2.0),
                _run(f"{hz} · round 2", 1990, 16, "c", 5.0),
                _run(f"{hz} · round 3", 0, 16, "c", 0.0, ok=False),  # not a round
            ]
        },
    }
    rows = show.ratio_rows(records)
    assert [r["sequences per GPU"] for r in rows] == [4, 16]
    assert list(rows[0]) == show.RATIO_COLUMNS
    assert rows[0]["ZeRO-2 / FSDP2"] == "1.270" and rows[0]["FSDP2 tokens/s/GPU"] == "500"
    assert rows[1]["ZeRO-2 / FSDP2"] == "0.995"  # per GPU: medians 1000 / 1005
    assert rows[1]["exposed comm ms (FSDP2 / ZeRO-2)"] == "1.5 / 4.0"
    text = decision_rows([], {}, rows)[0]["evidence"]
    equal, unequal = "0.995× FSDP2's throughput at 16 sequences per GPU", "1.27× FSDP2's"
    assert equal in text and unequal in text and "at 4 sequences per GPU" in text
    assert text.index(equal) < text.index(unequal)  # the equal knobs lead


@pytest.fixture(scope="module")
def recorded():
    rows = show.ratio_rows()
    if len(rows) < len(show.PAIRS):
        pytest.skip("not every record of the ratio table is here")
    return rows


def test_the_ratio_falls_to_parity_with_the_micro_batch(recorded):
    sizes = [r["sequences per GPU"] for r in recorded]
    assert sizes == sorted(sizes) and sizes[0] == 4 and sizes[-1] == 16
    assert float(recorded[0]["ZeRO-2 / FSDP2"]) > 1.2
    assert abs(float(recorded[-1]["ZeRO-2 / FSDP2"]) - 1) < 0.01


def test_the_page_leads_with_the_equal_knobs():
    """The comparison's tables: the head-to-heads with the same knobs before the first recording
    (unequal knobs) and before the ratio across records."""
    text = PAGE.read_text()
    assert text.index("```{glue} ch06-equal") < text.index("```{glue} ch06-compare")
    assert text.index("```{glue} ch06-equal") < text.index("```{glue} ch06-ratio")


def test_decision_table_cites_the_ratio_with_its_micro_batch(recorded):
    evidence = decision_rows()[0]["evidence"]
    assert "at 4 sequences per GPU" in evidence and "with the same knobs in both" in evidence
    assert "parity" in evidence and "16 sequences per GPU" in evidence


def _summary(name, tps, mfu=0.5, framework="fsdp2"):
    row = {"name": name, "ok": True, "loss_ok": True, "framework": framework}
    return {"summary": {**row, "tokens_per_s_per_gpu": tps, "mfu": mfu, "mfu_all_params": mfu}}


def test_equal_rows_claim_a_lead_only_beyond_the_spread():
    name, gpus, zero, fsdp, _ = show.EQUAL[1]
    round_ = " · round "
    runs = [
        _summary(f"{zero}{round_}{k}", t, framework="colossal") for k, t in ((1, 104), (2, 105))
    ]
    runs += [_summary(f"{fsdp}{round_}{k}", t) for k, t in ((1, 100), (2, 90))]
    [row] = show.equal_rows({name: {"runs": runs}})
    assert row["ZeRO-2 / FSDP2"] == "1.100" and row["lead"] == "within the spread: none"
    runs[2:] = [_summary(f"{fsdp}{round_}{k}", t) for k, t in ((1, 100), (2, 99))]
    [row] = show.equal_rows({name: {"runs": runs}})
    assert row["lead"] == "beyond the spread" and row["GPUs"] == gpus
    assert show.equal_rows({}) == []
