"""Chapter 12's page: every glued output exists in the notebook, with its :doc: line, and the
chapter is in the table of contents and the introduction."""

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "book" / "12_in_practice.md").read_text()
NOTEBOOK = json.loads((ROOT / "notebooks" / "12_in_practice.ipynb").read_text())


def _glued() -> set[str]:
    keys = set()
    for cell in NOTEBOOK["cells"]:
        for out in cell.get("outputs", []):
            key = out.get("metadata", {}).get("scrapbook", {}).get("name")
            keys |= {key} if key else set()
    return keys


def test_every_glue_on_the_page_is_in_the_notebook():
    used = [line.split()[1] for line in PAGE.splitlines() if line.startswith("```{glue}")]
    assert len(used) >= 10
    for key in used:
        assert f"```{{glue}} {key}\n:doc: ../notebooks/12_in_practice.ipynb" in PAGE
    assert set(used) <= _glued(), set(used) - _glued()


def test_stored_outputs_have_no_errors_and_the_page_is_complete():
    for cell in NOTEBOOK["cells"]:
        assert all(o["output_type"] != "error" for o in cell.get("outputs", []))
    assert "## Summary" in PAGE and "## Exercises" in PAGE
    assert "book/12_in_practice" in (ROOT / "_toc.yml").read_text()
    assert "{doc}`12_in_practice`" in (ROOT / "book" / "intro.md").read_text()


def test_the_table_sorts_without_a_kernel():
    html = "".join(
        "".join(o.get("data", {}).get("text/html", ""))
        for c in NOTEBOOK["cells"]
        for o in c.get("outputs", [])
    )
    assert "ch12-sortable" in html and "onclick=" in html


def _stored_table(key: str) -> list[dict]:
    """A glued table of the stored notebook (nbval checks that a fresh run gives the same)."""
    from html.parser import HTMLParser

    html = next(
        "".join(o["data"]["text/html"])
        for c in NOTEBOOK["cells"]
        for o in c.get("outputs", [])
        if o.get("metadata", {}).get("scrapbook", {}).get("name") == key
    )
    cells: list[list[str]] = []

    class Reader(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag == "tr":
                cells.append([])
            elif tag in ("td", "th"):
                cells[-1].append("")

        def handle_data(self, data):
            if cells and cells[-1]:
                cells[-1][-1] += data

    Reader().feed(html)
    head, *rows = cells
    return [dict(zip(head, r)) for r in rows]


def test_the_planner_statements_match_the_stored_ranking():
    rows = {r["run"]: r for r in _stored_table("ch12_planner")}
    assert rows["MEG-1.7B"]["published rank"] == rows["ALPACA"]["published rank"] == "1"
    assert rows["L3-16K GPUs"]["its sharding, mb, recompute"].startswith("FSDP")
    first = rows["MEG-1008.0B"]["planner's first"]
    assert "T=2" in first and "(all_to_all)" in first and "T = 2 with Ulysses" in PAGE


def test_the_patterns_quoted_on_the_page():
    from helpers.chapters.ch12_layouts import pattern_rows

    text = " ".join(PAGE.split())
    rows = {r["rule"].split(" (")[0]: r for r in pattern_rows()}
    tp = rows["TP stays inside a node"]
    assert tp["holds in"] == tp["runs it applies to"] and "in every layout that uses it" in text
    fill = rows["TP fills the node before PP starts"]
    assert fill["exceptions"] == "DSV3, BLOOM" and "except in BLOOM" in text
    dp = rows["DP"]
    assert dp["holds in"] > dp["runs it applies to"] / 2 and "in most layouts" in text
    assert rows["EP appears exactly for MoE models"]["exceptions"] == "none"


def test_every_glued_number_is_in_the_notebook():
    import re

    used = set(re.findall(r"12_in_practice\.ipynb::([a-z0-9_-]+):", PAGE))
    assert len(used) >= 20 and used <= _glued(), used - _glued()
