"""One symbol per quantity: every math symbol on the book's pages is defined in book/notation.md.

The notation page holds two kinds of symbol: global ones (the parallel layout, the model and the
batch), each defined once and meaning the same on every page, and local ones, used inside one
derivation on the pages the table names. The test reads every ``$...$`` and ``$$...$$`` span of
the pages and notebooks listed in CHECKED (their markdown; code blocks and inline code are
skipped) and asserts that each symbol in it is global or local to that page.

The other chapters' pages are read too; what they use that the table does not define is reported
as a warning (``test_other_pages_report``), not asserted.
"""

import json
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
NOTATION = BOOK / "notation.md"

# page stem -> notebooks whose markdown shares the page's local symbols
CHECKED = {
    "intro": [],
    "notation": [],
    "01_dimensions": ["01_dimensions"],
    "02_combining": ["02_combining"],
    "09_quick_demos": ["09_quick_demos"],
    "glossary": [],
    "03_strategy": ["03_strategy"],
    "04_config": ["04_config"],
    "06_frameworks": ["06_frameworks"],
    "07_memory": ["07_memory"],
    "10_pitfalls": ["10_pitfalls"],
    "11_interview": ["11_interview"],
    "05_launch": ["05_launch"],
    "08_troubleshooting": ["08_troubleshooting"],
    "12_in_practice": ["12_in_practice"],
}
# A global symbol that is also a local one, on purpose (the row on the notation page says why).
DECLARED_OVERLAPS = {"B"}
INDICES = {"i", "j"}  # a subscript i or j numbers the pieces of its base symbol
LATEX = set(
    "frac tfrac dfrac cdot times div sum prod left right big bigl bigr Big Bigl Bigr qquad quad "
    "approx le leq ge geq neq in notin dots ldots cdots lceil rceil lfloor rfloor nabla partial "
    "longrightarrow rightarrow to xrightarrow underbrace overbrace top infty sqrt max min log ln "
    "exp mid lvert rvert vert begin end".split()
)
# \begin{cases} and \end{cases}: the environment's name is no symbol either
WRAPPERS = r"\\(?:text|mathrm|texttt|operatorname|textrm|textit|mathit|begin|end)\s*\{[^{}]*\}"
BASE = r"\\mathcal\s*\{[A-Za-z]\}|\\[A-Za-z]+|[A-Za-z]"
SUB = r"_\s*(\{(?:[^{}]|\{[^{}]*\})*\}|\\[A-Za-z]+\s*\{[^{}]*\}|\\[A-Za-z]+|[A-Za-z0-9])"


def _norm_sub(sub: str) -> str:
    sub = re.sub(r"\\(?:text|mathrm|texttt|operatorname)\s*\{([^{}]*)\}", r"\1", sub)
    return re.sub(r"[{}\s\\]", "", sub)


def _norm_base(base: str) -> str:
    return re.sub(r"\s", "", base)


def symbols(math: str) -> set[str]:
    """The symbols of one math span: ``A_i`` counts as ``A``, ``V_{\\mathrm{dp}}`` as ``V_dp``."""
    found = set()

    def subscripted(m: re.Match) -> str:
        base, sub = _norm_base(m.group(1)), _norm_sub(m.group(2))
        if base.startswith("\\") and base[1:] in LATEX:  # \sum_{j=1}: the subscript's own symbols
            raw = m.group(2)
            return " " + (raw[1:-1] if raw.startswith("{") else raw) + " "
        found.add(base if sub in INDICES or sub.isdigit() else f"{base}_{sub}")
        return " "

    math = re.sub(rf"({BASE})\s*{SUB}", subscripted, math)
    math = re.sub(WRAPPERS, " ", math)
    for tok in re.findall(BASE, math):
        found.add(_norm_base(tok))
    return {t for t in found if not (t.startswith("\\") and t[1:] in LATEX)}


def _strip_code(text: str) -> str:
    """Markdown without code fences (MyST directives such as admonitions are kept) and inline
    code."""
    out, fence = [], None
    for line in text.splitlines():
        opening = re.match(r"^\s*(`{3,}|~{3,})(.*)$", line)
        if fence is None and opening:
            marks, info = opening.groups()
            if not (info.strip().startswith("{") and not info.strip().startswith("{glue")):
                fence = marks  # a directive's content (an admonition, the glossary) is prose
            out.append("")
            continue
        if fence is not None:
            if line.strip().startswith(fence[:3]) and line.strip().strip("`~") == "":
                fence = None
            out.append("")
            continue
        out.append("" if line.strip() in ("```", "~~~") else line)
    return re.sub(r"`[^`\n]*`", " ", "\n".join(out))


def math_spans(text: str) -> list[tuple[int, str]]:
    """(line, content) of every display and inline math span."""
    text = _strip_code(text)
    spans = []
    pattern = re.compile(
        r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\s)((?:[^$\n]|\n(?!\s*\n))+?)(?<!\s)\$", re.S
    )
    for m in pattern.finditer(text):
        spans.append((text[: m.start()].count("\n") + 1, m.group(1) or m.group(2)))
    return spans


def notebook_markdown(stem: str) -> str:
    cells = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text())["cells"]
    return "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def _table_rows(section: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:]  # without the header


def notation() -> tuple[dict[str, int], dict[str, set[str]]]:
    """(global symbol -> how many rows define it, local symbol -> the pages it may appear on)."""
    text = NOTATION.read_text()
    parts = re.split(r"^## ", text, flags=re.M)
    global_count: dict[str, int] = {}
    local: dict[str, set[str]] = {}
    for part in parts[1:]:
        title = part.splitlines()[0]
        for row in _table_rows(part):
            syms = set().union(*(symbols(m) for m in re.findall(r"\$([^$]+)\$", row[0])))
            if title.startswith("Inside one derivation"):
                pages = set(re.findall(r"\{doc\}`([^`]+)`", row[2]))
                every = "every page" in row[2]
                for sym in syms:
                    local.setdefault(sym, set()).update({"*"} if every else pages)
            else:
                for sym in syms:
                    global_count[sym] = global_count.get(sym, 0) + 1
    return global_count, local


def undefined(stem: str, text: str) -> dict[str, list[int]]:
    global_count, local = notation()
    missing: dict[str, list[int]] = {}

    def known(sym: str) -> bool:
        pages = local.get(sym, set())
        return sym in global_count or "*" in pages or stem in pages or stem == "notation"

    for line, math in math_spans(text):
        for sym in symbols(math):
            base, _, sub = sym.partition("_")
            if known(sym) or (sub in global_count and known(base)):  # A_T: A's last block
                continue
            missing.setdefault(sym, []).append(line)
    return missing


def test_the_tokenizer():
    assert symbols(r"V_{\mathrm{dp}} = 2\,\frac{D-1}{D}\cdot 2\Psi \ \text{bytes}") == {
        "V_dp",
        "D",
        "\\Psi",
    }
    assert symbols(r"\sum_{i=1}^{T} Y_i B_i") == {"i", "T", "Y", "B"}
    assert symbols(r"\mathcal{B}_i, t_f, \Psi_{\mathrm{mm}}, n_{\mathrm{exp}}") == {
        "\\mathcal{B}",
        "t_f",
        "\\Psi_mm",
        "n_exp",
    }
    assert symbols(
        r"S' = \begin{cases} S & \texttt{ring\_attn} \\ 1 & \text{else} \end{cases}"
    ) == {"S"}
    spans = math_spans("a $x$ and `$y$` and\n```python\n$z$\n```\n$$\nG = D\n$$")
    assert [s.strip() for _, s in spans] == ["x", "G = D"]


def test_one_row_per_global_symbol():
    global_count, local = notation()
    assert {"G", "D", "T", "P", "S", "E", "\\Psi", "b", "s", "h", "a", "L", "v"} <= set(
        global_count
    )
    assert {sym: n for sym, n in global_count.items() if n > 1} == {}
    assert set(global_count) & set(local) == DECLARED_OVERLAPS
    assert "S" not in {"bytes"}  # bytes have no letter: see the page's opening paragraph
    assert "never given a letter of their own" in NOTATION.read_text()


@pytest.mark.parametrize("stem", sorted(CHECKED))
def test_every_symbol_is_defined(stem):
    texts = [(f"book/{stem}.md", (BOOK / f"{stem}.md").read_text())]
    texts += [(f"notebooks/{nb}.ipynb", notebook_markdown(nb)) for nb in CHECKED[stem]]
    problems = {where: undefined(stem, text) for where, text in texts}
    assert {where: p for where, p in problems.items() if p} == {}


RETIRED = {
    # old symbol use -> what it is now
    r"\(p\s*-\s*1\)": "the pipeline degree is P",
    r"\$p\s*=": "the pipeline degree is P",
    r"s/P\b": "the sequence degree is S",
    r"E/P\b": "experts per rank are n_exp/E",
    r"\\text\{ep\}": "the expert degree is E",
    r"\(d, p, t\)": "coordinates are (r_D, r_P, r_T)",
}


@pytest.mark.parametrize("stem", sorted(CHECKED))
def test_retired_symbols_are_gone(stem):
    texts = [(BOOK / f"{stem}.md").read_text()] + [notebook_markdown(nb) for nb in CHECKED[stem]]
    if stem == "notation":
        return
    for text in texts:
        spans = " ".join(m for _, m in math_spans(text))
        for pattern, why in RETIRED.items():
            assert not re.search(pattern, f"${spans}$"), f"{stem}: {pattern} ({why})"


def test_notation_page_is_in_the_toc_and_linked():
    toc = (ROOT / "_toc.yml").read_text()
    assert "file: book/notation" in toc
    for stem in ("intro", "01_dimensions"):
        assert "{doc}`notation`" in (BOOK / f"{stem}.md").read_text(), stem


def test_other_pages_report():
    """The other pages' symbols the table does not define: reported, not asserted."""
    report = {}
    for page in sorted(BOOK.glob("*.md")):
        if page.stem in CHECKED:
            continue
        missing = undefined(page.stem, page.read_text())
        if missing:
            report[page.name] = {sym: lines[:3] for sym, lines in sorted(missing.items())}
    if report:
        warnings.warn(f"symbols not in book/notation.md: {report}", stacklevel=1)
