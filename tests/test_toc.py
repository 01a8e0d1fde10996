"""The table of contents and the files of the book agree, and notebooks carry their outputs.

* every file listed in ``_toc.yml`` exists (as ``.md`` or ``.ipynb``);
* every page under ``book/`` and every notebook under ``notebooks/`` is listed (with
  ``only_build_toc_files: true`` an unlisted file would silently be left out of the book);
* every notebook was stored after one clean top-to-bottom run: at least one output, every
  non-empty code cell executed (execution counts increasing), no stored error;
* every chapter page ``book/NN_topic.md`` has its notebook ``notebooks/NN_topic.ipynb``, listed in
  ``_toc.yml`` as a section of that page, or is marked as a stub: a line ``% stub`` (a MyST
  comment, not rendered), front matter ``notebook: none``, or a note saying
  "This chapter is an outline" (the pages' convention for chapters whose notebook is to come).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = re.compile(r"^\d\d_[A-Za-z0-9_]+$")
STUB_LINE = re.compile(
    r"^\s*(%|<!--)\s*(stub\b|notebook:\s*none\b)|\bThis chapter is an outline\b",
    re.IGNORECASE | re.MULTILINE,
)
FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)


def _toc() -> dict:
    return yaml.safe_load((ROOT / "_toc.yml").read_text())


def _entries(node, parent=None):
    """(file, parent file) for every `file:` entry of a jb-book toc, depth first."""
    if isinstance(node, dict):
        here = node.get("file", parent)
        if "file" in node:
            yield node["file"], parent
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key) or []:
                yield from _entries(child, here)
    elif isinstance(node, list):
        for child in node:
            yield from _entries(child, parent)


def _toc_files() -> dict[str, str | None]:
    toc = _toc()
    files = {toc["root"]: None}
    for entry, parent in _entries(toc, toc["root"]):
        assert entry not in files, f"{entry} is listed twice in _toc.yml"
        files[entry] = parent
    return files


def _resolve(entry: str) -> Path | None:
    for suffix in ("", ".md", ".ipynb"):
        path = ROOT / (entry + suffix)
        if path.is_file():
            return path
    return None


def _notebooks() -> list[Path]:
    return sorted(
        p for p in (ROOT / "notebooks").glob("**/*.ipynb") if ".ipynb_checkpoints" not in p.parts
    )


def _pages() -> list[Path]:
    return sorted((ROOT / "book").glob("**/*.md"))


def test_toc_format():
    toc = _toc()
    assert toc.get("format") == "jb-book"
    assert toc.get("root") == "book/intro"


def test_every_toc_entry_exists():
    missing = [entry for entry in _toc_files() if _resolve(entry) is None]
    assert not missing, f"listed in _toc.yml but not found (.md/.ipynb): {missing}"


def test_every_page_and_notebook_is_in_toc():
    listed = {str(Path(entry).with_suffix("")) for entry in _toc_files()}
    unlisted = [
        str(path.relative_to(ROOT))
        for path in _pages() + _notebooks()
        if str(path.relative_to(ROOT).with_suffix("")) not in listed
    ]
    assert not unlisted, f"not in _toc.yml, so left out of the book: {unlisted}"


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.name)
def test_notebook_has_stored_outputs(path: Path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    source = lambda c: "".join(c["source"]) if isinstance(c["source"], list) else c["source"]  # noqa: E731
    ran = [c for c in code if source(c).strip()]
    assert any(c.get("outputs") for c in code), (
        f"{path.name} has no stored outputs: run it and save"
    )
    not_run = [
        i for i, c in enumerate(code) if source(c).strip() and c.get("execution_count") is None
    ]
    assert not not_run, f"{path.name}: code cells {not_run} (0-based among code cells) were not run"
    counts = [c["execution_count"] for c in ran]
    assert counts == sorted(counts) and len(set(counts)) == len(counts), (
        f"{path.name}: execution counts {counts} are not increasing: rerun top to bottom and save"
    )
    errors = [
        i
        for i, c in enumerate(code)
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
        and "raises-exception" not in c.get("metadata", {}).get("tags", [])
    ]
    assert not errors, (
        f"{path.name}: code cells {errors} stored an error (tag raises-exception if intended)"
    )


def _is_stub(page: Path) -> bool:
    text = page.read_text()
    match = FRONT_MATTER.match(text)
    if match:
        meta = yaml.safe_load(match.group(1)) or {}
        if str(meta.get("notebook", "")).lower() in ("none", "false") or meta.get("stub") is True:
            return True
    return bool(STUB_LINE.search(text))


@pytest.mark.parametrize(
    "page", [p for p in _pages() if CHAPTER.match(p.stem)], ids=lambda p: p.name
)
def test_chapter_page_has_its_notebook_or_is_a_stub(page: Path):
    notebook = ROOT / "notebooks" / f"{page.stem}.ipynb"
    if not notebook.exists():
        assert _is_stub(page), (
            f"{page.relative_to(ROOT)} has no notebooks/{page.stem}.ipynb; "
            "if it has none on purpose, mark it with a line '% stub', "
            "front matter 'notebook: none' or a note 'This chapter is an outline'"
        )
        return
    parents = _toc_files()
    entry = f"notebooks/{page.stem}"
    assert parents.get(entry) == f"book/{page.stem}", (
        f"{entry} should be listed in _toc.yml as a section of book/{page.stem}"
    )
