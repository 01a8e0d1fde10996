"""Chapter 10's pitfalls and Chapter 11's question bank: counts, answers, links, pages.

* the bank has at least 60 questions, 25 of them numeric, every level and chapter known, ids unique;
* every stored numeric answer is graded right by the helper that computes it, and a wrong one is
  not;
* every link target exists: the chapter page, and the section heading (exactly once) it points to;
* the quiz widget grades a typed answer;
* at least 15 pitfalls, each demonstrated and corrected (``holds``), each glued on the page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.chapters import ch10_pitfalls, ch11_interview as quiz

ROOT = Path(__file__).resolve().parents[1]
BANK = quiz.bank()
NUMERIC = [q for q in BANK if q.numeric]


def test_counts():
    counts = quiz.counts()
    assert counts["questions"] >= 60
    assert counts["numeric"] >= 25
    assert all(counts[level] >= 10 for level in quiz.LEVELS)
    assert len({q.id for q in BANK}) == len(BANK)
    assert {q.level for q in BANK} <= set(quiz.LEVELS)
    assert {q.chapter for q in BANK} <= set(quiz.CHAPTERS)
    assert len(ch10_pitfalls.PITFALLS) >= 15
    assert len(ch10_pitfalls.BY_KEY) == len(ch10_pitfalls.PITFALLS)


# each part of the bank: its chapter, and the least questions (numeric ones) it holds
PARTS = {
    "ch11_pipeline": ("01_dimensions", 4, 2),
    "ch11_mesh_trace": ("02_combining", 4, 2),
    "ch11_flagship": ("08_troubleshooting", 4, 2),
    "ch11_context_parallel": ("09_quick_demos", 4, 2),
    "ch11_practice": ("12_in_practice", 8, 4),
}


@pytest.mark.parametrize("name", PARTS)
def test_each_new_part_is_in_the_bank_with_its_chapter_and_size(name):
    import importlib

    part = importlib.import_module(f"helpers.chapters.{name}").QUESTIONS
    chapter, least, numeric = PARTS[name]
    assert {q.chapter for q in part} == {chapter}
    assert len(part) >= least and sum(q.numeric for q in part) >= numeric
    assert {q.id for q in part} <= {q.id for q in BANK}


@pytest.mark.parametrize("q", NUMERIC, ids=[q.id for q in NUMERIC])
def test_stored_answer_matches_helper(q):
    assert q.stored is not None
    assert q.grade(q.stored), f"{q.id}: stored {q.stored}, helper gives {q.value()}"
    assert not q.grade(q.stored * 1.1 + 1), "a wrong answer must not pass"
    assert "{value}" in q.answer and q.value_text() in q.worked()


@pytest.mark.parametrize("q", BANK, ids=[q.id for q in BANK])
def test_link_target_exists(q):
    page = ROOT / "book" / f"{q.chapter}.md"
    assert page.exists(), page
    if q.section is not None:
        headings = re.findall(r"^#+ (.+?)\s*$", page.read_text(), re.MULTILINE)
        assert headings.count(q.section) == 1, (
            f"{q.id}: heading {q.section!r} not found once in {page.name}"
        )
    assert q.href().startswith(f"../book/{q.chapter}.html")


def test_every_chapter_page_has_questions_and_renders_links():
    for chapter in quiz.CHAPTERS:
        html = quiz.chapter_html(chapter)
        assert html.count("<li>") == sum(q.chapter == chapter for q in BANK) > 0, chapter
        assert f'href="../book/{chapter}.html' in html


def test_feedback_and_widget():
    q = quiz.by_id("c2-data-degree")
    assert quiz.feedback(q, 8).startswith("8") and "right" in quiz.feedback(q, 8)
    assert "not quite" in quiz.feedback(q, 16)
    box = quiz.quiz_widget()
    pick, _, row, verdict = box.children
    given, button = row.children
    pick.value = "c1-bubble-4-4"
    given.value = 3 / 7
    button.click()
    assert "right" in verdict.value
    given.value = 0.25
    button.click()
    assert "not quite" in verdict.value


IN_PROCESS = [
    p
    for p in ch10_pitfalls.PITFALLS
    if p.key not in ("pp-loss-rank", "gpt2-causal", "a2a-unsupported")
]


@pytest.mark.parametrize("p", IN_PROCESS, ids=[p.key for p in IN_PROCESS])
def test_pitfall_demonstrated_and_corrected(p):
    shown = p.demo()
    assert shown.holds is True, shown
    assert shown.wrong and shown.fixed


@pytest.mark.parametrize("key", ["pp-loss-rank", "gpt2-causal", "a2a-unsupported"])
def test_pitfall_runs(key):
    """The demos that start two gloo ranks or call Colossal-AI / transformers code."""
    assert ch10_pitfalls.BY_KEY[key].demo().holds is True


def test_pages_glue_every_pitfall_and_chapter():
    ten = (ROOT / "book" / "10_pitfalls.md").read_text()
    eleven = (ROOT / "book" / "11_interview.md").read_text()
    for p in ch10_pitfalls.PITFALLS:
        assert f"```{{glue}} ch10-{p.key}\n:doc: ../notebooks/10_pitfalls.ipynb" in ten, p.key
        assert f"{{doc}}`{p.chapter}`" in ten, p.chapter
        assert (ROOT / "book" / f"{p.chapter}.md").exists()
    for chapter in quiz.CHAPTERS:
        assert f"```{{glue}} ch11-{chapter}\n:doc: ../notebooks/11_interview.ipynb" in eleven, (
            chapter
        )
    for page in (ten, eleven):
        assert "This chapter is an outline" not in page


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
