"""Chapter 12's interview questions: numeric answers from the book's helpers, links that exist."""

import math
from pathlib import Path

import pytest

from helpers.chapters.ch11_interview import LEVELS
from helpers.chapters.ch11_practice import QUESTIONS

PAGE = (Path(__file__).resolve().parents[1] / "book" / "12_in_practice.md").read_text()


def test_bank_size():
    assert len(QUESTIONS) >= 8 and sum(q.numeric for q in QUESTIONS) >= 4
    assert len({q.id for q in QUESTIONS}) == len(QUESTIONS)


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: q.id)
def test_question(q):
    assert q.chapter == "12_in_practice" and q.level in LEVELS
    assert q.section is not None and PAGE.count(f"# {q.section}\n") == 1, q.section
    if q.numeric:
        assert math.isclose(q.stored, q.value(), rel_tol=q.rel_tol), (q.stored, q.value())
        assert "{value}" in q.answer and q.grade(q.stored)
