"""Chapter 8's glued numbers: what notebook 08 stored is what the records give today, the page
quotes only keys the notebook glues, and the helpers that compute them hold their claims."""

import json
import math
import re
from pathlib import Path

import pytest

from helpers.chapters import ch08_flagship, ch08_lever_numbers, ch08_levers, ch08_numbers
from helpers.chapters.ch08_tp_placement import tp_placement_numbers
from helpers.figures.ch08_profile_split import EXAMPLE, example_splits, exposed_intervals
from helpers.record.results import find

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks/08_troubleshooting.ipynb"
RECORDS = ("flagship", "flagship_h2h", "flagship_levers", "flagship_levers_h2h", "flagship_fp8")
needs_records = pytest.mark.skipif(
    any(find(n, gpus=1) is None and find(n, gpus=2) is None for n in RECORDS)
    or find("ch08_tune", gpus=2) is None,
    reason="no recorded Chapter 8 GPU result",
)


def _stored() -> dict:
    """The notebook's glued plain-text values by key."""
    out = {}
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        for o in cell.get("outputs", []):
            meta = o.get("metadata", {}).get("scrapbook")
            if meta:
                out[meta["name"]] = o["data"].get(meta.get("mime_prefix", "") + "text/plain")
    return out


def _recomputed() -> dict:
    """Every number notebook 08 glues from a record or a model (not the live labs)."""
    levers = ch08_levers.recorded("flagship_levers")
    best = ch08_levers.by_name(levers)["cuDNN + Liger CE + micro-batch 48"]
    run = next(r for r in levers["runs"] if r["name"] == best["name"])
    fp8 = ch08_levers.recorded("flagship_fp8")
    fp8_row = next(s for s in ch08_levers.rows(fp8) if s.get("fp8") == "torch")
    one = ch08_flagship.recorded("flagship", gpus=1)
    return {
        **ch08_numbers.oom_numbers(),
        **ch08_numbers.tune_numbers(),
        **ch08_numbers.flagship_numbers(
            ch08_flagship.recorded(), ch08_flagship.recorded("flagship_h2h"), one
        ),
        **ch08_lever_numbers.lever_numbers(levers),
        **ch08_lever_numbers.lever_h2h_numbers(ch08_levers.recorded("flagship_levers_h2h")),
        **ch08_lever_numbers.trace_numbers(best, ch08_levers.model_phases(run["args"])),
        **ch08_lever_numbers.fp8_numbers(fp8, len(ch08_levers.fp8_kernels(fp8_row, top=1000))),
        **tp_placement_numbers(),
    }


@needs_records
def test_stored_numbers_are_the_records():
    stored = _stored()
    for key, value in _recomputed().items():
        assert key in stored, f"notebook 08 does not glue {key}: re-store it"
        assert stored[key] == repr(value), f"{key}: stored {stored[key]}, now {value!r}"


def test_every_number_the_page_quotes_is_glued():
    page = (ROOT / "book/08_troubleshooting.md").read_text()
    quoted = set(re.findall(r"08_troubleshooting\.ipynb::([\w-]+):", page))
    assert len(quoted) > 200 and not quoted - set(_stored())


def test_the_split_figure_is_the_profilers_split():
    """The concept figure's exposed intervals add up to what the profiler's split counts, and the
    rank that reaches the last all-reduce first shows the wait as communication."""
    splits = example_splits()
    for rank, events in EXAMPLE.items():
        exposed = sum(b - a for a, b in exposed_intervals(events))
        assert math.isclose(exposed, splits[rank]["exposed_comm_ms"])
    assert splits[0]["exposed_comm_ms"] > splits[1]["exposed_comm_ms"]


@needs_records
def test_the_head_to_head_runs_the_lever_records_best_row():
    """flagship_levers.BEST, the levers both head-to-head runs get, are those of the fastest row
    of the lever record that kept its loss (its trace flags aside)."""
    from helpers.record.flagship_levers import BASE, BEST, H2H, LEVERS

    best = ch08_lever_numbers.lever_numbers(ch08_levers.recorded("flagship_levers"))
    added = [
        a for a in dict(LEVERS)[best["ch08-best-name"]] if a not in ("--trace", "--memory_snapshot")
    ]
    assert added == BEST and H2H[0][1] == BASE + BEST and H2H[1][1][-len(BEST) :] == BEST


@needs_records
def test_counted_attention_runs_faster_than_it_computes():
    """The MFU count charges attention the whole s × s score matrix; a causal kernel computes
    about half of it, so the counted rate is twice the rate of the work done, and above half the
    reference rate on the best row."""
    n = ch08_lever_numbers.lever_numbers(ch08_levers.recorded("flagship_levers"))
    assert n["ch08-best-attention-half-rate"] * 2 == pytest.approx(n["ch08-best-attention-rate"])
    assert n["ch08-best-attention-rate"] > 50
