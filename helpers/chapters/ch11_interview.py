"""Chapter 11's question bank on the page: each chapter's questions with their answers folded, and
the quiz widget that grades a typed answer.

Used by ``notebooks/11_interview.ipynb`` and ``tests/test_quiz.py``. The questions are data
(``helpers/data/interview/*.yaml``), loaded and checked by :mod:`helpers.chapters.ch11_bank`;
nothing here holds a question. Each answer is rendered as the book's dropdown admonition
(``admonition dropdown``, the markup MyST gives ```` ```{admonition} ```` with ``:class:
dropdown``), so the built page folds it away like every other answer in the book.
"""

from __future__ import annotations

from html import escape

from helpers.chapters.ch11_bank import Question, bank, by_id


def feedback(q: Question, given: float) -> str:
    """The verdict on a reader's answer, with the worked answer."""
    verdict = "right" if q.grade(given) else f"not quite: the answer is {q.value_text()}"
    return f"{given:g} {q.unit} — {verdict}. {q.worked()}".replace("  ", " ")


def _item(q: Question) -> str:
    where = f"Chapter {int(q.chapter[:2])}" + (f", “{q.section}”" if q.section else "")
    tag = " · computed" if q.numeric else ""
    return (
        f'<li id="{q.id}"><p><b>[{q.level}{tag}]</b> {escape(q.question)}</p>'
        '<div class="admonition dropdown"><p class="admonition-title">Answer</p>'
        f'<p>{escape(q.worked())} <a href="{q.href()}">{escape(where)}</a></p></div></li>'
    )


def chapter_html(chapter: str) -> str:
    """One chapter's questions as an HTML list, each answer in a dropdown with its link."""
    return "<ol>" + "".join(_item(q) for q in bank() if q.chapter == chapter) + "</ol>"


def show_chapter(chapter: str) -> int:
    """Glue a chapter's questions as ``ch11-<chapter>`` for the page (shown there, not here);
    return how many there are."""
    from IPython.display import HTML

    try:
        from myst_nb import glue
    except ImportError:  # a GPU box with only the notebook tools: show them here
        from IPython.display import display

        display(HTML(chapter_html(chapter)))
    else:
        glue(f"ch11-{chapter}", HTML(chapter_html(chapter)), display=False)
    return sum(q.chapter == chapter for q in bank())


def quiz_widget():
    """Pick a computed question, type an answer, press "check": right or wrong, then the worked
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
        unit = f" (in {escape(q.unit)})" if q.unit else ""
        text.value = f"<p>{escape(q.question)}{unit}</p>"
        verdict.value = ""

    def on_check(_):
        verdict.value = f"<p>{escape(feedback(by_id(pick.value), given.value))}</p>"

    pick.observe(on_pick, names="value")
    check.on_click(on_check)
    on_pick()
    return w.VBox([pick, text, w.HBox([given, check]), verdict])


def show_quiz() -> None:
    """Display :func:`quiz_widget`, with a one-line text where no widget can be drawn."""
    from IPython.display import display

    bundle = quiz_widget()._repr_mimebundle_()
    bundle["text/plain"] = "The quiz: pick a question, type an answer, press check (a live kernel)."
    display(bundle, raw=True)
