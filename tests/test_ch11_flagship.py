"""Chapter 8's flagship interview questions: answer keys equal their references, the chapter and
section exist on the page."""

import re
from pathlib import Path

import pytest

from helpers.chapters.ch11_flagship import QUESTIONS
from helpers.chapters.ch11_interview import CHAPTERS, LEVELS

PAGE = (Path(__file__).resolve().parents[1] / "book" / "08_troubleshooting.md").read_text()
HEADINGS = {m.group(1).strip() for m in re.finditer(r"^#+ (.+)$", PAGE, re.M)}


def test_enough_questions_and_numeric_ones():
    assert len(QUESTIONS) >= 4
    assert sum(q.numeric for q in QUESTIONS) >= 2
    assert len({q.id for q in QUESTIONS}) == len(QUESTIONS)


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.id)
def test_question(q):
    assert q.chapter == "08_troubleshooting" and q.chapter in CHAPTERS and q.level in LEVELS
    assert q.section in HEADINGS, f"no heading {q.section!r} on the page"
    if q.numeric:
        assert q.grade(q.stored), f"{q.id}: stored {q.stored} vs {q.value()}"
        assert "{value}" in q.answer
