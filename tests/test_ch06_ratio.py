"""Chapter 6's ZeRO-2 / FSDP2 ratio beside Chapter 8's parity (helpers.chapters.ch06_frameworks
.ratio_rows): computed from the records, quoted by the page with its micro-batch, and cited so by
the decision table."""

import re
from pathlib import Path

import pytest

from helpers.chapters import ch06_frameworks as show
from helpers.config.framework_choice import decision_rows

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
    assert "1.27× FSDP2's throughput at 4 sequences per GPU" in text
    assert "0.995× at 16" in text


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


def test_page_quotes_the_ratios_and_the_exposed_communication(recorded):
    text = " ".join(PAGE.read_text().split())
    for r in recorded:
        assert r["ZeRO-2 / FSDP2"] in text, r
    fsdp, zero = recorded[0]["exposed comm ms (FSDP2 / ZeRO-2)"].split(" / ")
    assert f"({fsdp} against {zero} ms at 4 sequences per GPU)" in text
    assert "```{glue} ch06-ratio" in PAGE.read_text()


def test_every_1_27_on_the_page_says_at_which_micro_batch():
    text = " ".join(PAGE.read_text().split())
    for m in re.finditer(r"1\.27\b", text):
        near = text[max(0, m.start() - 300) : m.end() + 300]
        assert "4 sequences per GPU" in near, near


def test_decision_table_cites_the_ratio_with_its_micro_batch(recorded):
    evidence = decision_rows()[0]["evidence"]
    assert "at 4 sequences per GPU" in evidence and "at 16 with the same knobs" in evidence
    assert "parity" in evidence
