"""Tables in a notebook and on its chapter page: Markdown, HTML, and the glued display.

Used by the notebooks of Chapters 2, 3, 4, 6, 7, 8, 9 and 10: :func:`show_table` displays a list
of row dicts and glues it (myst-nb) under a key that the chapter page pastes, as
:func:`helpers.notebook.plots.show` does for figures.

Tables fit the page's column (book/_static/book.css): cells wrap between words, and a word longer
than ``LONG_WORD`` characters (an identifier, a path, a command) may also wrap after one of
``/ . _ ( = , : @`` (:func:`breakable`); numbers and short words never break. A table of few
rows and many columns fits only on its side: :func:`transposed`.
"""

from __future__ import annotations

import re
from html import escape

LONG_WORD = 24
_AFTER_SEPARATOR = re.compile(r"(?<=[/._(=,:@])(?=\w)")


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """A Markdown table (for a page or a README)."""

    def esc(v) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(
        lines + ["| " + " | ".join(esc(r.get(c, "")) for c in columns) + " |" for r in rows]
    )


def breakable(text: str) -> str:
    """``text`` escaped for HTML, with a line-break opportunity (``<wbr>``) in each word longer
    than ``LONG_WORD`` characters after every separator followed by a letter or digit; shorter
    words are only escaped, so a table without long words is the same HTML as before."""
    words = re.split(r"(\s+)", text)
    return "".join(
        "<wbr>".join(escape(p) for p in _AFTER_SEPARATOR.split(w) if p)
        if len(w) > LONG_WORD
        else escape(w)
        for w in words
    )


def html_table(rows: list[dict], columns: list[str]) -> str:
    """An HTML table: what the notebook displays and the chapter page pastes (myst-nb glue)."""
    head = "".join(f"<th>{breakable(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{breakable(str(r.get(c, '')))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def transposed(rows: list[dict], by: str, columns: list[str] | None = None) -> list[dict]:
    """The table on its side: one row per column of ``rows`` (named under the header ``by``),
    one column per row (headed by its ``by`` value). ``columns``: which, default all but ``by``."""
    names = [c for c in (columns or columns_of(rows)) if c != by]
    return [{by: c, **{str(r[by]): r.get(c, "") for r in rows}} for c in names]


def columns_of(rows: list[dict]) -> list[str]:
    """Every key of the rows, in the order it first appears (a key only a later row has is kept)."""
    return list(dict.fromkeys(k for r in rows for k in r))


def show_table(rows: list[dict], columns: list[str] | None = None, key: str | None = None) -> None:
    """Display a table in the notebook and glue it as ``key`` for the chapter page (like
    plots.show). ``columns``: which and in what order (default :func:`columns_of` the rows)."""
    from IPython.display import HTML, display

    table = HTML(html_table(rows, columns or columns_of(rows)))
    try:
        from myst_nb import glue
    except ImportError:  # a GPU box with only the notebook tools
        display(table)
    else:
        if key is None:
            display(table)
        else:
            glue(key, table, display=True)


def glue_numbers(numbers: dict) -> None:
    """Glue each number under its key for a chapter page's ``{glue:text}`` (myst-nb), shown
    nowhere in the notebook; nothing where myst-nb is missing (a GPU box with only the notebook
    tools)."""
    try:
        from myst_nb import glue
    except ImportError:
        return
    for key, value in numbers.items():
        glue(key, value, display=False)
