"""Chapter 7's figure of activation offload: memory against speed, one point per run.

:func:`offload_figure` draws the rows of :func:`helpers.chapters.ch07_offload.rows`: with a record,
each run's measured peak (``max_memory_allocated``) against its tokens/s, the model's peak as an
open marker on the same line, and a run that ran out of memory at the GPU's capacity; without one,
the model's peaks alone, as bars.
"""

from __future__ import annotations

COLOURS = {
    "none": "#4C72B0",
    "offload": "#DD8452",
    "save_on_cpu": "#937860",
    "recompute": "#55A868",
}


def offload_figure(rows: list[dict], labels: dict, gpu_gib: float | None = None):
    """Peak memory (x) against tokens/s (y) per run, or the model's peaks when nothing is
    measured."""
    import matplotlib.pyplot as plt

    measured = [r for r in rows if r.get("measured") is not None]
    fig, ax = plt.subplots(figsize=(7.2, 4.4), dpi=80)
    if not measured:
        shown = [r for r in rows if r["predicted"] is not None]
        names = [f"{labels[r['name']]} (b = {r['micro_batch']})" for r in shown]
        ax.barh(names, [r["predicted"] for r in shown], color=[COLOURS[r["mode"]] for r in shown])
        ax.invert_yaxis()
        ax.set(xlabel="predicted peak, max_memory_allocated (GiB)", title="The model alone")
        fig.tight_layout()
        return fig
    for r in measured:
        colour, y = COLOURS[r["mode"]], r["tokens_per_s"]
        marker = "o" if r["size"] == "b" else "s"
        ax.scatter(r["measured"], y, color=colour, marker=marker, zorder=3, s=50)
        if r["predicted"] is not None:
            ax.plot([r["measured"], r["predicted"]], [y, y], color=colour, lw=0.8)
            ax.scatter(r["predicted"], y, facecolors="none", edgecolors=colour, marker=marker)
        ax.annotate(
            f"{labels[r['name']]} (b = {r['micro_batch']})",
            (r["measured"], y),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=8,
        )
    if gpu_gib:
        ax.axvline(gpu_gib, color="grey", ls="--", lw=1)
        for r in rows:
            if r.get("oom"):
                ax.annotate(
                    f"{labels[r['name']]} (b = {r['micro_batch']}): out of memory",
                    (gpu_gib, 0),
                    textcoords="offset points",
                    xytext=(-6, 8),
                    ha="right",
                    fontsize=8,
                    color="grey",
                )
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0, right=1.05 * max([gpu_gib or 0] + [r["measured"] for r in measured]))
    ax.set(
        xlabel="peak max_memory_allocated (GiB); open marker: the model",
        ylabel="tokens/s",
        title="Memory against speed: circles at micro-batch b, squares at the larger one",
    )
    fig.tight_layout()
    return fig
