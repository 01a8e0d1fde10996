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
