"""Chapter 11's interview questions: the bank's record type, grading, rendering and the quiz widget.

Used by ``notebooks/11_interview.ipynb`` and ``tests/test_quiz.py``. The questions themselves are
data: computed answers in :mod:`helpers.chapters.ch11_numeric_dimensions` and
:mod:`helpers.chapters.ch11_numeric_costs`, worked answers in prose in
:mod:`helpers.chapters.ch11_concepts_dimensions`, :mod:`helpers.chapters.ch11_concepts_planning`
and :mod:`helpers.chapters.ch11_concepts_systems`. A numeric question carries

* ``reference``: a function that computes the answer with the helper the book uses for it
  (``helpers.parallel.layouts.data_degree``, ``helpers.parallel.pp.bubble_fraction``,
  ``helpers.cost.memory``, ``helpers.cost.comm``, ``helpers.cost.mfu`` ...), so the answer is never
  typed twice;
* ``stored``: the answer key as printed in the bank, checked against ``reference`` by the tests;
* ``rel_tol``: how close a reader's answer must be (relative, default 2 %).

Its worked answer contains ``{value}``, filled in from ``reference`` when rendered, so the page's
numbers come from code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Callable

LEVELS = ("basic", "intermediate", "advanced")
CHAPTERS = (
    "01_dimensions",
    "02_combining",
    "03_strategy",
    "04_config",
    "05_launch",
    "06_frameworks",
    "07_memory",
    "08_troubleshooting",
    "09_quick_demos",
    "10_pitfalls",
    "12_in_practice",
)


@dataclass(frozen=True)
class Question:
    id: str
    chapter: str  # the page that explains it, e.g. "02_combining"
    level: str  # one of LEVELS
    question: str
    answer: str  # worked answer; numeric ones contain {value}
    section: str | None = None  # a heading of that page, or None for the whole chapter
    reference: Callable[[], float] | None = None
    stored: float | None = None
    unit: str = ""
    fmt: str = "{:.4g}"
    rel_tol: float = 0.02

    @property
    def numeric(self) -> bool:
        return self.reference is not None

    def value(self) -> float:
        if self.reference is None:
            raise ValueError(f"{self.id} is not a numeric question")
        return float(self.reference())

    def value_text(self) -> str:
        return f"{self.fmt.format(self.value())}{' ' + self.unit if self.unit else ''}"

    def worked(self) -> str:
        return self.answer.format(value=self.value_text()) if self.numeric else self.answer

    def grade(self, given: float) -> bool:
        """True when ``given`` is within ``rel_tol`` of the reference (or both are ~0)."""
        return math.isclose(float(given), self.value(), rel_tol=self.rel_tol, abs_tol=1e-12)

    def href(self) -> str:
        """Link to the explaining section, valid from book/ and notebooks/ alike (the page alone
        where docutils, part of the book's toolchain, is not installed: a GPU box with notebook
        tools only)."""
        try:
            from docutils.nodes import make_id  # the anchor Sphinx gives a heading
        except ImportError:
            make_id = None
        anchor = f"#{make_id(self.section)}" if self.section and make_id else ""
        return f"../book/{self.chapter}.html{anchor}"


def bank() -> list[Question]:
    """Every question, ordered by chapter, then level."""
    from helpers.chapters import (
        ch11_concepts_dimensions,
        ch11_concepts_planning,
        ch11_concepts_systems,
        ch11_context_parallel,
        ch11_flagship,
        ch11_mesh_trace,
        ch11_numeric_costs,
        ch11_numeric_dimensions,
        ch11_pipeline,
        ch11_practice,
    )

    parts = (
        ch11_numeric_dimensions,
        ch11_numeric_costs,
        ch11_concepts_dimensions,
        ch11_concepts_planning,
        ch11_concepts_systems,
        ch11_pipeline,
        ch11_mesh_trace,
        ch11_flagship,
        ch11_context_parallel,
        ch11_practice,
    )
    order = list(CHAPTERS)
    return sorted(
        (q for part in parts for q in part.QUESTIONS),
        key=lambda q: (order.index(q.chapter), LEVELS.index(q.level), q.id),
    )


def by_id(qid: str) -> Question:
    for q in bank():
        if q.id == qid:
            return q
    raise KeyError(f"no question {qid!r}")


def counts() -> dict[str, int]:
    qs = bank()
    return {
        "questions": len(qs),
        "numeric": sum(q.numeric for q in qs),
        **{level: sum(q.level == level for q in qs) for level in LEVELS},
    }


def feedback(q: Question, given: float) -> str:
    """The verdict on a reader's answer, with the worked answer."""
    verdict = "right" if q.grade(given) else f"not quite: the answer is {q.value_text()}"
    return f"{given:g} {q.unit} — {verdict}. {q.worked()}".replace("  ", " ")


def chapter_html(chapter: str) -> str:
    """One chapter's questions as an HTML list, each answer folded under <details> with its link."""
    items = []
    for q in (q for q in bank() if q.chapter == chapter):
        where = f"Chapter {int(q.chapter[:2])}" + (f", “{q.section}”" if q.section else "")
        tag = " · numeric" if q.numeric else ""
        items.append(
            f"<li><p><b>[{q.level}{tag}]</b> <code>{q.id}</code> {escape(q.question)}</p>"
            f"<details><summary>Worked answer</summary><p>{escape(q.worked())} "
            f'<a href="{q.href()}">{escape(where)}</a></p></details></li>'
        )
    return "<ol>" + "".join(items) + "</ol>"


def show_chapter(chapter: str) -> None:
    """Display a chapter's questions and glue them as ``ch11-<chapter>`` for the page."""
    from IPython.display import HTML

    html = HTML(chapter_html(chapter))
    try:
        from myst_nb import glue
    except ImportError:
        from IPython.display import display

        display(html)
    else:
        glue(f"ch11-{chapter}", html, display=True)


def quiz_widget():
    """Pick a numeric question, type an answer, press "check": right or wrong, then the worked
    answer."""
    import ipywidgets as w

    numeric = [q for q in bank() if q.numeric]
    pick = w.Dropdown(
        options=[(f"{q.id} ({q.level})", q.id) for q in numeric], description="question"
    )
    text = w.HTML()
    given = w.FloatText(value=0.0, description="answer")
    check = w.Button(description="check")
    verdict = w.HTML()

    def on_pick(_=None):
        q = by_id(pick.value)
        text.value = (
            f"<p>{escape(q.question)}{' (in ' + escape(q.unit) + ')' if q.unit else ''}</p>"
        )
        verdict.value = ""

    def on_check(_):
        verdict.value = f"<p>{escape(feedback(by_id(pick.value), given.value))}</p>"

    pick.observe(on_pick, names="value")
    check.on_click(on_check)
    on_pick()
    return w.VBox([pick, text, w.HBox([given, check]), verdict])
