"""The chapters are written for their reader: the lesson on the page, the record in the appendix.

Checked for every chapter (page ``book/NN_*.md`` and notebook ``notebooks/NN_*.ipynb``), with
``-k chNN`` selecting one chapter:

* **no process bookkeeping** outside the appendix ``book/measured*``: commit hashes, "typed
  today", the launcher's ``RESULT-PART`` framing and ``PIPE_BUF``, GPU-machine calls and leases,
  CI runs, test counts. Pages, the notebooks' markdown and their stored text outputs are read;
* **the opening teaches**: the text before the first section heading names no ``helpers/`` file;
* **numbers are glued, not typed**: a decimal number typed in a page's prose that equals a number
  the chapter's notebook glues (exactly, or at the precision typed when it has three significant
  digits or more), fails. The page must glue it instead
  (``{glue:text}`` with a format), so the page cannot drift from the run;
* **the code is on the page**: every from-scratch algorithm listed in ``ALGORITHMS`` is shown on
  its chapter's page through ``literalinclude`` with start and end markers;
* **exercises with hidden answers**: every chapter page has an Exercises section and answers in a
  dropdown (``:class: dropdown``) or a ``{toggle}``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p for p in (ROOT / "book").glob("[0-9][0-9]_*.md"))

# Bookkeeping a reader has no use for; it belongs in the appendix "How this book was measured".
BOOKKEEPING = {
    "commit hash": re.compile(
        r"\bcommit(?:ted)?\s+`?[0-9a-f]{7,40}\b|\b(?=[0-9a-f]*[a-f])"
        r"(?=[0-9a-f]*[0-9])[0-9a-f]{12,40}\b"
    ),
    "typed today": re.compile(r"typed today", re.IGNORECASE),
    "RESULT-PART framing": re.compile(r"RESULT-PART"),
    "PIPE_BUF": re.compile(r"PIPE_BUF"),
    "GPU-machine call": re.compile(
        r"\b(device|GPU)[- ]machine (call|run|lease|session)s?\b|\blease\b|budget_left",
        re.IGNORECASE,
    ),
    "CI run": re.compile(r"\bin CI\b|\bCI (run|job|machine)s?\b|\.ci/run"),
    "test count": re.compile(r"\b\d[\d,]*\s+(?:tests?\s+)?passed\b|\b\d[\d,]* tests\b"),
}

# From-scratch algorithms and the page that shows them (literalinclude with markers).
ALGORITHMS = {
    "helpers/demos/ch01_dp.py": "01",
    "helpers/demos/ch01_tp.py": "01",
    "helpers/parallel/tp.py": "01",
    "helpers/demos/ch01_pp.py": "01",
    "helpers/demos/ch01_sp.py": "01",
    "helpers/parallel/sp.py": "01",
    "helpers/parallel/pp_schedules.py": "01",
    "helpers/parallel/mesh.py": "02",
    "helpers/demos/ch02_3d.py": "02",
    "helpers/parallel/zero.py": "07",
    "helpers/parallel/cp.py": "09",
    "helpers/parallel/ep.py": "09",
}

NUMBER = re.compile(r"(?<![\w.\-/])(\d+\.\d+)(?![\w.])")
GLUE_ROLE = re.compile(r"\{glue(?::\w+)?\}`[^`]*`")
FENCE = re.compile(r"^(```|~~~|:::).*?^\1", re.DOTALL | re.MULTILINE)
INLINE_CODE = re.compile(r"`[^`\n]*`")
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.DOTALL)
LITERALINCLUDE = re.compile(r"```\{literalinclude\}\s+(\S+)\n((?::[\w-]+:.*\n)*)")


def _chapter(page: Path) -> str:
    return page.stem[:2]


def _notebook(page: Path) -> Path:
    return ROOT / "notebooks" / f"{page.stem}.ipynb"


def _cells(nb: Path) -> list[dict]:
    return json.loads(nb.read_text())["cells"] if nb.is_file() else []


def _text(cell_source) -> str:
    return "".join(cell_source) if isinstance(cell_source, list) else cell_source


def _notebook_texts(nb: Path) -> list[tuple[str, str]]:
    """(where, text) for each markdown cell and each stored text output of a notebook."""
    out = []
    for i, cell in enumerate(_cells(nb)):
        if cell["cell_type"] == "markdown":
            out.append((f"{nb.name} cell {i} (markdown)", _text(cell["source"])))
        for o in cell.get("outputs", []):
            text = o.get("text") or o.get("data", {}).get("text/plain", "")
            if text:
                out.append((f"{nb.name} cell {i} (output)", _text(text)))
    return out


def _glued(nb: Path) -> dict[str, str]:
    """The notebook's glued keys and their stored plain-text values."""
    glued = {}
    for cell in _cells(nb):
        for o in cell.get("outputs", []):
            name = o.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                prefix = o["metadata"]["scrapbook"].get("mime_prefix", "")
                data = o.get("data", {})
                glued[name] = _text(data.get(prefix + "text/plain", data.get("text/plain", "")))
    return glued


def _prose(page_text: str) -> str:
    """The page's running text: no fenced blocks, math, inline code or glue roles."""
    text = FENCE.sub("", page_text)
    text = MATH.sub("", text)
    text = GLUE_ROLE.sub("", text)
    return INLINE_CODE.sub("", text)


def bookkeeping_hits(texts: list[tuple[str, str]]) -> list[str]:
    """Lines of ``texts`` that carry process bookkeeping, named by where they are and by kind."""
    hits = []
    for where, text in texts:
        for line in text.splitlines():
            for kind, pattern in BOOKKEEPING.items():
                if pattern.search(line):
                    hits.append(f"{where}: {kind}: {line.strip()[:120]}")
    return hits


def typed_glued_numbers(page_text: str, glued: dict[str, str]) -> list[str]:
    """Decimal numbers typed in the prose that equal a glued value at the precision typed."""
    values = []
    for key, raw in glued.items():
        try:
            values.append((key, float(raw.strip().strip("'\"").replace(",", ""))))
        except ValueError:
            continue
    found = []
    for token in set(NUMBER.findall(_prose(page_text))):
        decimals = len(token.split(".")[1])
        for key, value in values:
            digits = len(token.replace(".", "").lstrip("0"))
            same = value != 0 and abs(value - float(token)) < 1e-12
            if same or (digits >= 3 and f"{value:.{decimals}f}" == token):
                found.append(f"{token} (glued as {key} = {value!r})")
                break
    return sorted(found)


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: f"ch{_chapter(p)}")
def test_no_bookkeeping_outside_the_appendix(page: Path):
    texts = [(page.name, page.read_text())] + _notebook_texts(_notebook(page))
    hits = bookkeeping_hits(texts)
    assert not hits, "move these to the appendix (book/measured/):\n" + "\n".join(hits)


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: f"ch{_chapter(p)}")
def test_opening_names_no_helper_file(page: Path):
    opening = page.read_text().split("\n## ", 1)[0]
    files = sorted(set(re.findall(r"helpers/[\w/]+\.py", opening)))
    assert not files, f"{page.name}: the opening should say what the reader learns, not {files}"


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: f"ch{_chapter(p)}")
def test_numbers_the_notebook_computes_are_glued(page: Path):
    typed = typed_glued_numbers(page.read_text(), _glued(_notebook(page)))
    assert not typed, f"{page.name} types numbers its notebook glues; glue them: {typed}"


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: f"ch{_chapter(p)}")
def test_algorithms_are_shown_with_markers(page: Path):
    wanted = [path for path, ch in ALGORITHMS.items() if ch == _chapter(page)]
    included = {}
    for target, options in LITERALINCLUDE.findall(page.read_text()):
        included[(page.parent / target).resolve()] = options
    for path in wanted:
        options = included.get((ROOT / path).resolve())
        assert options is not None, f"{page.name} does not literalinclude {path}"
        assert ":start-after:" in options and ":end-before:" in options, (
            f"{page.name}: include {path} between markers (:start-after:/:end-before:)"
        )


@pytest.mark.parametrize("page", CHAPTERS, ids=lambda p: f"ch{_chapter(p)}")
def test_exercises_with_hidden_answers(page: Path):
    text = page.read_text()
    assert re.search(r"^#+ .*Exercises", text, re.MULTILINE), f"{page.name}: no Exercises section"
    assert re.search(r":class: dropdown|\{toggle\}", text), (
        f"{page.name}: answers are not hidden behind a dropdown or toggle"
    )


def test_the_checks_can_fail():
    """Each check finds what it is built to find."""
    assert bookkeeping_hits([("p", "Recorded at commit 1a2b3c4d, typed today as x.")])
    assert bookkeeping_hits([("p", "make test: 2,021 passed")])
    assert not bookkeeping_hits([("p", "The ring moves 2(n-1)/n of the bytes.")])
    glued = {"ch12-eps": "0.5253", "ch12-n": "17"}
    assert typed_glued_numbers("The efficiency is 0.525 here.", glued) == [
        "0.525 (glued as ch12-eps = 0.5253)"
    ]
    assert not typed_glued_numbers("It is {glue:text}`nb::ch12-eps:.3f` here.", glued)
    assert not typed_glued_numbers("Use `0.525` in code.", glued)
    for algorithm in ALGORITHMS:
        assert (ROOT / algorithm).is_file(), f"ALGORITHMS names a missing file: {algorithm}"
