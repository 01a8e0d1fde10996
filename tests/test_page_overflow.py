"""Wide things fit the page, without a browser: the stylesheet's arithmetic and show_table's HTML.

tests/test_book_build.py measures the built pages in Chromium (tests/page_overflow.py); these
checks run everywhere in milliseconds. book/_static/book.css sets the geometry: at 1366 px the
article column holds 100 characters of 13 px code in the widest usual monospace font; the HTML
tables of helpers.notebook.tables may wrap long identifiers and paths, never a number or a short
word, and a table without long words is the same HTML as before.
"""

from __future__ import annotations

import re
from html import escape
from pathlib import Path

from helpers.notebook.tables import LONG_WORD, breakable, html_table, transposed

CSS = Path(__file__).resolve().parents[1] / "book" / "_static" / "book.css"
REM = 16  # px, the browsers' default root font size
MONOSPACE_EM = 0.602  # advance of DejaVu Sans Mono and Menlo, the widest usual monospace fonts
SCROLLBAR = 15  # px a classic vertical scroll bar takes from a 1366 px window


def _rem(pattern: str) -> float:
    found = re.search(pattern + r"\s*:?\s*(-?[0-9.]+)rem", CSS.read_text())
    assert found, f"{pattern} not set in rem in {CSS}"
    return float(found.group(1))


def test_the_column_holds_100_characters_of_code_at_1366_px():
    left = _rem(r"\.bd-sidebar-primary \{\s*flex-basis")
    right = _rem(r"--pst-sidebar-secondary")
    code = _rem(r"\.bd-article pre \{\s*font-size")
    assert _rem(r"margin-left") == -left, "the hidden left sidebar's margin must be its width"
    article_padding, pre_padding, border = 2 * 2 * REM, 2 * 1 * REM, 2  # the theme's, in px
    column = 1366 - SCROLLBAR - (left + right) * REM - article_padding - pre_padding - border
    assert 100 * MONOSPACE_EM * code * REM <= column, (code, column)
    assert code * REM >= 12, "code smaller than 12 px is hard to read"


def test_short_words_are_only_escaped():
    text = "a < b & 'c' 1,234,567.89 0.0014 tp_size=2 parallel_plugin.py"
    assert breakable(text) == escape(text)
    assert html_table([{"x": text}], ["x"]) == (
        f'<table class="table"><thead><tr><th>x</th></tr></thead>'
        f"<tbody><tr><td>{escape(text)}</td></tr></tbody></table>"
    )


def test_long_identifiers_and_paths_may_wrap_after_a_separator():
    path = "colossalai/booster/plugin/hybrid_parallel_plugin.py:1151"
    assert len(path) > LONG_WORD
    assert breakable(path) == (
        "colossalai/<wbr>booster/<wbr>plugin/<wbr>hybrid_<wbr>parallel_<wbr>plugin.<wbr>py:<wbr>1151"
    )
    assert breakable("PipelineGraph(...).get_v_schedule()") == (
        "PipelineGraph(...).<wbr>get_<wbr>v_<wbr>schedule()"
    )
    assert breakable("sequence_parallelism_mode='all_to_all'").replace("<wbr>", "") == escape(
        "sequence_parallelism_mode='all_to_all'"
    )


def test_transposed_turns_a_wide_table_on_its_side():
    rows = [{"run": "a", "mbs": 1, "MFU %": 40.5}, {"run": "b", "mbs": 2}]
    assert transposed(rows, "run") == [
        {"run": "mbs", "a": 1, "b": 2},
        {"run": "MFU %", "a": 40.5, "b": ""},
    ]
    assert transposed(rows, "run", ["MFU %"]) == [{"run": "MFU %", "a": 40.5, "b": ""}]
