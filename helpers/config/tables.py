"""Tables in a notebook and on its chapter page: Markdown, HTML, and the glued display.

Used by the notebooks of Chapters 2, 3, 4, 6, 7, 8, 9 and 10: :func:`show_table` displays a list
of row dicts and glues it (myst-nb) under a key that the chapter page pastes, as
:func:`helpers.notebook.plots.show` does for figures.
"""

from __future__ import annotations


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """A Markdown table (for a page or a README)."""

    def esc(v) -> str:
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(
        lines + ["| " + " | ".join(esc(r.get(c, "")) for c in columns) + " |" for r in rows]
    )


def html_table(rows: list[dict], columns: list[str]) -> str:
    """An HTML table: what the notebook displays and the chapter page pastes (myst-nb glue)."""
    from html import escape

    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(r.get(c, '')))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def show_table(rows: list[dict], columns: list[str], key: str) -> None:
    """Display a table in the notebook and glue it as ``key`` for the chapter page (like
    plots.show)."""
    from IPython.display import HTML, display

    table = HTML(html_table(rows, columns))
    try:
        from myst_nb import glue
    except ImportError:  # a GPU box with only the notebook tools
        display(table)
    else:
        glue(key, table, display=True)
