"""Chapter 12's published layouts as tables: sortable, as degree points, and checked for patterns.

Used by ``notebooks/12_in_practice.ipynb``: :func:`sortable_html` (a table the reader sorts by
clicking a column head, in the notebook and on the built page alike: plain HTML with an inline
handler, no kernel and no widget manager needed), :func:`degree_points` (each run's parallel
degrees, model size and GPU count, which :func:`helpers.figures.ch12_in_practice.degrees_figure`
draws), and :func:`pattern_rows` (the folklore rules checked on the published layouts). The scale
simulation's figure is :func:`helpers.figures.ch12_in_practice.scale_figure`.
"""

from __future__ import annotations

from html import escape

from helpers.chapters.ch12_predict import value
from helpers.chapters.ch12_published import RUNS
from helpers.cost.hardware import preset

# sorts the rows of the clicked column's table: numbers numerically, the rest as text; a second
# click reverses
_SORT = (
    "var t=this.closest('table'),b=t.tBodies[0],i=this.cellIndex,"
    "d=this.dataset.d=this.dataset.d==='1'?'-1':'1',"
    "r=Array.from(b.rows),v=function(x){var s=x.cells[i].innerText,n=parseFloat(s);"
    "return isNaN(n)?s:n};"
    "r.sort(function(a,c){var p=v(a),q=v(c);return (p>q?1:p<q?-1:0)*d});"
    "r.forEach(function(x){b.appendChild(x)});"
)


def sortable_html(rows: list[dict], columns: list[str] | None = None) -> str:
    """An HTML table whose column heads sort it when clicked (again: reverse order)."""
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(
        f'<th style="cursor:pointer" title="click to sort" onclick="{_SORT}">{escape(c)} ⇅</th>'
        for c in columns
    )
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(r.get(c, '')))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return (
        '<table class="table ch12-sortable"><thead><tr>'
        f"{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def show_sortable(rows: list[dict], key: str, columns: list[str] | None = None) -> None:
    """Display the sortable table and glue it as ``key`` for the chapter page."""
    from IPython.display import HTML, display

    table = HTML(sortable_html(rows, columns))
    try:
        from myst_nb import glue
    except ImportError:  # a GPU box with only the notebook tools
        display(table)
    else:
        glue(key, table, display=True)


DEGREES = ("tp", "pp", "dp", "cp", "ep")


def degree_points() -> list[dict]:
    """(params, GPUs, each degree) of every run, assumed degrees included."""
    out = []
    for run in RUNS:
        point = {"run": run.key, "params": run.model.params / 1e9, "gpus": run.gpus}
        for name in DEGREES:
            point[name] = value(run, name) if name in ("tp", "pp", "dp") else getattr(run, name)
        out.append(point)
    return out


def pattern_rows() -> list[dict]:
    """The reusable rules, checked on every published layout; the exceptions named."""
    runs = RUNS
    node = {r.key: preset(r.cluster).gpus_per_node for r in runs}
    tp = {r.key: value(r, "tp") for r in runs}
    pp = {r.key: value(r, "pp") for r in runs}
    dp = {r.key: value(r, "dp") for r in runs}

    def rule(name, applies, holds):
        rel = [r for r in runs if applies(r)]
        bad = [r.key for r in rel if not holds(r)]
        return {
            "rule": name,
            "runs it applies to": len(rel),
            "holds in": len(rel) - len(bad),
            "exceptions": ", ".join(bad) or "none",
        }

    return [
        rule(
            "TP stays inside a node (T ≤ GPUs per node)",
            lambda r: tp[r.key] > 1,
            lambda r: tp[r.key] <= node[r.key],
        ),
        rule(
            "TP fills the node before PP starts (T = node when P > 1)",
            lambda r: pp[r.key] > 1,
            lambda r: tp[r.key] == node[r.key],
        ),
        rule(
            "a model copy (T·P) spans nodes only through PP",
            lambda r: tp[r.key] * pp[r.key] > node[r.key],
            lambda r: pp[r.key] > 1,
        ),
        rule(
            "DP (or FSDP) is the largest degree",
            lambda r: True,
            lambda r: dp[r.key] >= max(tp[r.key], pp[r.key], r.cp, r.ep),
        ),
        rule(
            "CP appears only for long context (s ≥ 32K)",
            lambda r: r.cp > 1 or r.seq >= 32768,
            lambda r: r.cp > 1 and r.seq >= 32768,
        ),
        rule(
            "EP appears exactly for MoE models",
            lambda r: True,
            lambda r: (r.ep > 1) == (r.source == "DSV3"),
        ),
        rule(
            "some TP in every run above 10 B parameters",
            lambda r: r.model.params > 10e9,
            lambda r: tp[r.key] > 1,
        ),
    ]
