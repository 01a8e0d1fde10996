"""Where a recorded number comes from: one line on the chapter, the whole record in the appendix.

A chapter shows a GPU record with one short line (:func:`measured_on`); the notebook glues the
record's full provenance (hardware, date, versions, command, commit) under a key with
:func:`glue_provenance`, and the appendix "How this book was measured" shows it with

    ```{glue} ch05-provenance-launch
    :doc: ../../notebooks/05_launch.ipynb
    ```

so the reader's page carries the lesson and the appendix the record, both from the same file under
``results/<hardware>/``.
"""

from __future__ import annotations

from html import escape

from IPython.display import HTML

from helpers.record.results import describe


def measured_on(record: dict) -> str:
    """``Measured on 1×NVIDIA-H200 on 2026-11-30; how: the appendix, ...`` for a record."""
    p = record["provenance"]
    return (
        f"Measured on {p['hardware'].replace('x', '×', 1)} on {p['date'][:10]}; "
        "how: the appendix, How this book was measured."
    )


def provenance_markdown(record: dict) -> str:
    """The record's full provenance as Markdown lines, for the appendix."""
    lines = describe(record).splitlines()
    return "\n".join(f"- {line}" for line in lines)


def markdown_list_to_html(text: str) -> str:
    """``- a`` lines as an HTML list (glue across pages renders HTML, not Markdown)."""
    items = "".join(f"<li>{escape(line.removeprefix('- '))}</li>" for line in text.splitlines())
    return f"<ul>{items}</ul>"


def glue_provenance(key: str, record: dict | None) -> None:
    """Glue the record's full provenance under ``key`` for the appendix; shown nowhere here.

    Nothing is glued where myst-nb is missing (a GPU box with only the notebook tools) or when
    there is no record (the appendix then says so through the missing key at build time)."""
    try:
        from myst_nb import glue
    except ImportError:
        return
    text = provenance_markdown(record) if record else "- Not recorded on this machine."
    glue(key, HTML(markdown_list_to_html(text)), display=False)
