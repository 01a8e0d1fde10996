"""Chapter 10's pitfalls and Chapter 11's question bank, both held as data.

* the bank (``helpers/data/interview/*.yaml``) loads: at least 100 questions, 25 computed, every
  level used, every chapter a page of the book, ids unique;
* every computed answer computes, agrees with its answer key and shows its unit once; a wrong
  answer is not graded right;
* every question renders, its answer folded in a dropdown, and every link target exists: the
  chapter page and the section heading (exactly once) it names;
* the questions use the book's notation (no ``N_d``, no ``v`` for chunks, ...);
* the loader rejects a bad entry and says which file and question: a missing or unknown field, an
  unknown function, arguments the function does not take, a duplicate id, ``{value}`` without a
  function;
* no import circle: the answer functions import neither the bank nor its rendering;
* the quiz widget grades a typed answer;
* the pitfalls (``helpers/data/pitfalls.yaml``): at least 15, each demonstrated and corrected
  (``holds``), each a heading and a glue block of Chapter 10's page; the loader rejects a bad one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from helpers.chapters import ch10_pitfalls, ch11_bank, ch11_interview

ROOT = Path(__file__).resolve().parents[1]
BANK = ch11_bank.bank()
COMPUTED = [q for q in BANK if q.numeric]
PITFALLS = ch10_pitfalls.pitfalls()


def test_counts():
    counts = ch11_bank.counts()
    assert counts["questions"] >= 100 and counts["computed"] >= 25
    assert all(counts[level] >= 10 for level in ch11_bank.LEVELS)
    assert len({q.id for q in BANK}) == len(BANK)
    assert all((ROOT / "book" / f"{chapter}.md").is_file() for chapter in ch11_bank.chapters())
    assert len(ch11_bank.chapters()) >= 11


@pytest.mark.parametrize("q", COMPUTED, ids=[q.id for q in COMPUTED])
def test_computed_answer_agrees_with_its_key(q):
    assert q.grade(q.expected), f"{q.id}: key {q.expected}, the function gives {q.value()}"
    assert not q.grade(q.expected * 1.1 + 1), "a wrong answer must not pass"
    worked = q.worked()
    assert "{value}" not in worked and q.value_text() in worked
    after = worked.split(q.value_text(), 1)[1].lstrip()
    assert not (q.unit and after.startswith(q.unit)), f"{q.id}: the unit twice: {worked}"


def test_every_function_is_used_and_every_question_renders():
    used = {q.compute for q in COMPUTED}
    assert used == set(ch11_bank.functions()), set(ch11_bank.functions()) - used
    for chapter in ch11_bank.chapters():
        html = ch11_interview.chapter_html(chapter)
        mine = [q for q in BANK if q.chapter == chapter]
        assert html.count("<li ") == len(mine) > 0, chapter
        assert html.count('class="admonition dropdown"') == len(mine)
        assert all(f'id="{q.id}"' in html for q in mine)
        assert f'href="../book/{chapter}.html' in html


@pytest.mark.parametrize("q", BANK, ids=[q.id for q in BANK])
def test_link_target_exists(q):
    page = ROOT / "book" / f"{q.chapter}.md"
    if q.section is not None:
        headings = re.findall(r"^#+ (.+?)\s*$", page.read_text(), re.MULTILINE)
        assert headings.count(q.section) == 1, (
            f"{q.id}: heading {q.section!r} not found once in {page.name}"
        )
    assert q.href().startswith(f"../book/{q.chapter}.html")


# symbols the notation page gives another meaning (book/notation.md)
OFF_NOTATION = {
    "N_d for the data degree": re.compile(r"N_d\s*[=,)]|/N_d"),
    "S for bytes": re.compile(r"/N\s*·\s*S\b|·\s*S\s*/\s*β"),
    "v for chunks": re.compile(r"\bv\s*·\s*m\b|\bV stages\b"),
    "p for the pipeline degree": re.compile(r"\(p−1\)|\bp−1\b"),
    "T and E for tokens and experts": re.compile(r"·\s*T\s*/\s*E\b"),
    "C for the context degree": re.compile(r"T·C·P"),
    "P for the Ulysses degree": re.compile(r"Ulysses[^.?]*\bP = \d"),
}


@pytest.mark.parametrize("q", BANK, ids=[q.id for q in BANK])
def test_book_notation(q):
    text = f"{q.question} {q.answer}"
    for what, pattern in OFF_NOTATION.items():
        assert not pattern.search(text), f"{q.id}: {what}: {text}"


def _load(tmp_path: Path, entry: str) -> str:
    (tmp_path / "01_dimensions.yaml").write_text("questions:\n" + entry)
    with pytest.raises(ch11_bank.BankError) as err:
        ch11_bank.load(tmp_path)
    return str(err.value)


GOOD = """  - id: c1-x
    level: basic
    question: The bubble?
    answer: (P−1)/(m+P−1) = {value}.
    compute: parallel.bubble
    args: {stages: 4, microbatches: 8}
    expected: 0.2727
"""


@pytest.mark.parametrize(
    "change, message",
    [
        (("level: basic", "level: easy"), "level 'easy' is not one of"),
        (("    level: basic\n", ""), "missing ['level']"),
        (("expected:", "answer_key:"), "unknown ['answer_key']"),
        (("parallel.bubble", "parallel.bubbel"), "unknown function 'parallel.bubbel'"),
        (("stages: 4", "layers: 4"), "parallel.bubble: missing a required argument"),
        (("    expected: 0.2727\n", ""), "needs {value} and an 'expected' key"),
        (("    compute: parallel.bubble\n", ""), "without a 'compute' function"),
    ],
)
def test_loader_names_the_mistake(tmp_path, change, message):
    text = _load(tmp_path, GOOD.replace(*change))
    assert "01_dimensions.yaml, question 1 (c1-x)" in text or "question 1" in text, text
    assert message in text, text


def test_loader_accepts_a_good_entry_and_refuses_a_duplicate(tmp_path):
    (tmp_path / "01_dimensions.yaml").write_text("questions:\n" + GOOD)
    [q] = ch11_bank.load(tmp_path)
    assert q.chapter == "01_dimensions" and q.grade(3 / 11)
    assert "already used" in _load(tmp_path, GOOD + GOOD)


def test_no_import_circle():
    def imports(name: str) -> set[str]:
        path = ROOT / "helpers" / "chapters" / f"{name}.py"
        tree = ast.parse(path.read_text())
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
        return found

    upper = {"helpers.chapters.ch11_bank", "helpers.chapters.ch11_interview"}
    for name in ("ch11_answers_parallel", "ch11_answers_cost"):
        assert not imports(name) & upper, name
    assert "helpers.chapters.ch11_interview" not in imports("ch11_bank")


def test_feedback_and_widget():
    q = ch11_bank.by_id("c2-data-degree")
    assert ch11_interview.feedback(q, 8).startswith("8") and "right" in ch11_interview.feedback(
        q, 8
    )
    assert "not quite" in ch11_interview.feedback(q, 16)
    box = ch11_interview.quiz_widget()
    pick, _, row, verdict = box.children
    given, button = row.children
    pick.value = "c1-bubble-4-4"
    given.value = 3 / 7
    button.click()
    assert "right" in verdict.value
    given.value = 0.25
    button.click()
    assert "not quite" in verdict.value


# --- Chapter 10's pitfalls

SLOW = {p.key for p in PITFALLS if p.kind in ("launched", "library")}
QUICK = [p for p in PITFALLS if p.key not in SLOW]


@pytest.mark.parametrize("p", QUICK, ids=[p.key for p in QUICK])
def test_pitfall_demonstrated_and_corrected(p):
    shown = p.demo()
    assert shown.holds is True, shown
    assert shown.wrong and shown.fixed


@pytest.mark.parametrize("key", sorted(SLOW))
def test_pitfall_runs(key):
    """The demos that start processes or call Colossal-AI / transformers code."""
    assert ch10_pitfalls.by_key(key).demo().holds is True


def test_pitfalls_are_on_the_page():
    ten = (ROOT / "book" / "10_pitfalls.md").read_text()
    headings = re.findall(r"^### (.+?)\s*$", ten, re.MULTILINE)
    groups = re.findall(r"^## (.+?)\s*$", ten, re.MULTILINE)
    assert len(PITFALLS) >= 15 and headings[: len(PITFALLS)] == [p.title for p in PITFALLS]
    for p in PITFALLS:
        assert f"```{{glue}} ch10-{p.key}\n:doc: ../notebooks/10_pitfalls.ipynb" in ten, p.key
        assert f"{{doc}}`{p.chapter}`" in ten, p.chapter
        assert p.group in groups, p.group


def test_pitfall_loader_names_the_mistake(tmp_path):
    good = (
        "pitfalls:\n  - key: k\n    group: g\n    title: t\n    belief: b\n"
        "    chapter: 01_dimensions\n    demo: costs.too_few_microbatches\n    kind: computed\n"
    )
    path = tmp_path / "pitfalls.yaml"
    path.write_text(good)
    assert ch10_pitfalls.load(path)[0].demo().holds
    for change, message in [
        (("kind: computed", "kind: shown"), "kind 'shown' is not one of"),
        (("costs.too_few", "costs.too_many"), "has no function 'too_many_microbatches'"),
        (("01_dimensions", "13_nothing"), "no chapter page"),
        (("    title: t\n", ""), "missing ['title']"),
    ]:
        path.write_text(good.replace(*change))
        with pytest.raises(ch10_pitfalls.PitfallError, match=re.escape(message)):
            ch10_pitfalls.load(path)


def test_book_pages_use_the_data():
    eleven = (ROOT / "book" / "11_interview.md").read_text()
    for chapter in ch11_bank.chapters():
        assert f"```{{glue}} ch11-{chapter}\n:doc: ../notebooks/11_interview.ipynb" in eleven


def _glossary_entries() -> list[tuple[list[str], str]]:
    """(term lines, definition) of every entry of book/glossary.md's glossary block."""
    text = (ROOT / "book" / "glossary.md").read_text()
    body = text[text.index("```{glossary}\n") + len("```{glossary}\n") : text.rindex("```")]
    entries = []
    for block in body.strip("\n").split("\n\n"):
        lines = block.splitlines()
        entries.append(
            (
                [ln for ln in lines if not ln.startswith("  ")],
                " ".join(ln for ln in lines if ln.startswith("  ")),
            )
        )
    return entries


def test_glossary_terms_bilingual_and_linked():
    entries = _glossary_entries()
    assert len(entries) >= 75
    han = re.compile(r"[\u4e00-\u9fff]")
    preamble = (ROOT / "book" / "glossary.md").read_text().split("```{glossary}")[0]
    names = re.search(r"\(([^)]*)\) are usually left in English", preamble, re.S).group(1)
    english_names = set(names.replace("\n", " ").split(", "))
    for terms, definition in entries:
        assert terms and not han.search(terms[0]), terms  # English first
        assert terms[0] in english_names or any(han.search(t) for t in terms[1:]), (
            f"no Chinese term for {terms[0]}"
        )
        links = re.findall(r"\{doc\}`([^`]+)`", definition)
        assert links, f"{terms[0]} links to no chapter"
        assert all((ROOT / "book" / f"{link}.md").exists() for link in links), (terms[0], links)
    for seed_term in ("数据并行", "张量并行", "流水线并行", "序列并行", "激活重计算"):
        assert any(seed_term in t for terms, _ in entries for t in terms), seed_term


def test_pages_use_only_defined_terms():
    defined = {t.lower() for terms, _ in _glossary_entries() for t in terms}
    for page in ("10_pitfalls", "11_interview"):
        for term in re.findall(r"\{term\}`([^`<]+)`", (ROOT / "book" / f"{page}.md").read_text()):
            assert term.lower() in defined, (page, term)
