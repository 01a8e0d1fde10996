"""Chapter 12's figures, sortable table and patterns, drawn from the published data and the models.

Used by ``notebooks/12_in_practice.ipynb``: :func:`sortable_html` (a table the reader sorts by
clicking a column head, in the notebook and on the built page alike: plain HTML with an inline
handler, no kernel and no widget manager needed), :func:`degrees_figure` (parallel degrees
against model size and GPU count), :func:`scale_figure` (the scale simulation), and
:func:`pattern_rows` (the folklore rules checked on the published layouts).
"""

from __future__ import annotations

from html import escape

import matplotlib.pyplot as plt

from helpers.chapters.ch12_predict import value
from helpers.chapters.ch12_published import RUNS
from helpers.cost.hardware import preset
from helpers.figures.style import DPI, RANK_COLOURS

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


DEGREES = (
    ("tp", "TP", "o"),
    ("pp", "PP", "s"),
    ("dp", "DP", "^"),
    ("cp", "CP", "D"),
    ("ep", "EP", "*"),
)


def degree_points() -> list[dict]:
    """(params, GPUs, each degree) of every run, assumed degrees included."""
    out = []
    for run in RUNS:
        point = {"run": run.key, "params": run.model.params / 1e9, "gpus": run.gpus}
        for name, _, _ in DEGREES:
            point[name] = value(run, name) if name in ("tp", "pp", "dp") else getattr(run, name)
        out.append(point)
    return out


def degrees_figure():
    """Parallel degrees of the published runs against model size (left) and GPU count (right)."""
    points = degree_points()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), dpi=DPI, sharey=True)
    for ax, x, label in ((axes[0], "params", "parameters (B)"), (axes[1], "gpus", "GPUs")):
        for k, (name, text, marker) in enumerate(DEGREES):
            xs = [p[x] for p in points if p[name] and p[name] > 1]
            ys = [p[name] for p in points if p[name] and p[name] > 1]
            ax.scatter(xs, ys, marker=marker, color=RANK_COLOURS[k], label=text, alpha=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log", base=2)
        ax.set_xlabel(label)
        ax.axhline(8, color="grey", lw=0.8, ls=":")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("degree (1 not drawn)")
    axes[0].text(1.1, 8.6, "one node = 8 GPUs", color="grey", fontsize=8)
    axes[1].legend(loc="upper left", fontsize=8)
    fig.suptitle("Published layouts: degrees against model size and GPU count")
    fig.tight_layout()
    return fig


def scale_figure(best: list[dict], fixed: list[dict]):
    """Step time and MFU of Llama 3 405B from 64 to 16,384 GPUs: the planner's best layout and
    the published T = 8 × P = 16; bubble share of the latter."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=DPI)
    for rows, label, colour in ((best, "planner's best", 0), (fixed, "T=8 × P=16 (published)", 1)):
        ok = [r for r in rows if "step s" in r]
        g = [r["GPUs"] for r in ok]
        a.plot(g, [r["step s"] for r in ok], "o-", color=RANK_COLOURS[colour], label=label)
        b.plot(g, [r["MFU %"] for r in ok], "o-", color=RANK_COLOURS[colour], label=f"MFU, {label}")
    ok = [r for r in fixed if "step s" in r]
    b.plot(
        [r["GPUs"] for r in ok],
        [r["bubble %"] for r in ok],
        "s--",
        color=RANK_COLOURS[3],
        label="bubble % (published layout)",
    )
    none = [r["GPUs"] for r in best if "step s" not in r]
    for ax in (a, b):
        if none:  # the sizes where nothing fits in memory
            ax.axvspan(min(none) / 1.3, max(none) * 1.3, color="grey", alpha=0.15)
            ax.text(min(none), 0.92, "nothing fits", transform=ax.get_xaxis_transform(), fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs (global batch fixed: 2,048 × 8,192 tokens)")
        ax.grid(alpha=0.3)
    a.legend(fontsize=8)
    b.legend(fontsize=8, loc="center left")
    a.set_yscale("log")
    a.set_ylabel("step time (s), model")
    b.set_ylabel("% (model)")
    fig.suptitle("Llama 3 405B by simulation: where adding GPUs stops paying")
    fig.tight_layout()
    return fig


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
