"""Chapter 9's figures of the Llama under ``HybridParallelPlugin``: each layout's speed and MFU,
and the losses of the NaN study.

:func:`hybrid_figure` draws the bars of :func:`helpers.chapters.ch09_hybrid_layouts.hybrid_bars`
(each recorded layout's slowest rank: tokens/s and MFU; one GPU in grey). :func:`nan_figure` draws
the loss curves of :func:`helpers.chapters.ch09_nan_study.loss_curves`, one panel per study
(parts ``nan`` and ``nan2048`` of ``helpers.record.ch09``), a variant in the same colour in each.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS


def hybrid_figure(bars: list[dict]):
    """Tokens/s and MFU of each layout, as bars; one GPU in grey. ``bars``: per layout that ran,
    its ``name``, ``gpus``, ``tokens_per_s`` and ``mfu`` (a fraction)."""
    fig, (speed, util) = plt.subplots(
        1, 2, figsize=(9, 0.45 * len(bars) + 1.2), dpi=DPI, sharey=True
    )
    colours = ["#8C8C8C" if b["gpus"] == 1 else RANK_COLOURS[0] for b in bars]
    y = list(range(len(bars)))[::-1]
    for ax, values, label, fmt in (
        (speed, [b["tokens_per_s"] for b in bars], "tokens/s (all GPUs)", "{:,.0f}"),
        (util, [100 * b["mfu"] for b in bars], "MFU (%)", "{:.1f} %"),
    ):
        ax.barh(y, values, color=colours)
        for k, v in zip(y, values):
            ax.text(v, k, " " + fmt.format(v), va="center", fontsize=7)
        ax.set_xlim(0, 1.3 * max(values))
        ax.set_xlabel(label)
    speed.xaxis.set_major_formatter(lambda v, _: f"{v / 1000:.0f}k")
    speed.set_yticks(y, [b["name"] for b in bars], fontsize=8)
    fig.tight_layout()
    return fig


def _variant(run: dict):
    """What a NaN-study run varies (tensor parallel, repeated batch, gathered logits), read from its
    recorded flags, so that the same variant keeps its colour in every panel; the name if no
    flags."""
    args = run.get("args")
    return (
        ("--tp" in args, "--repeat" in args, "--parallel_output" in args) if args else run["name"]
    )


def nan_figure(*studies: list[dict], titles: tuple[str, ...] = ()):
    """Loss per step of each NaN-study run on a log scale, one panel per study (the runs of part
    ``nan``, sequence 1,024, and of ``nan2048``); a variant keeps its colour and line style across
    panels, a cross marks a non-finite step, and a run that reported no losses is left out. A
    study's runs: their ``name``, recorded ``args`` and ``losses``."""
    fig, axes = plt.subplots(
        1,
        len(studies),
        figsize=(7 if len(studies) == 1 else 11, 3.2),
        dpi=DPI,
        sharey=True,
        squeeze=False,
    )
    styles: dict = {}
    for ax, runs, title in zip(axes[0], studies, list(titles) + [""] * len(studies)):
        for run in runs:
            losses = run["losses"]
            if not losses:
                continue
            colour, style = styles.setdefault(
                _variant(run),
                (
                    RANK_COLOURS[len(styles) % len(RANK_COLOURS)],
                    ("-", "--", ":", "-.")[len(styles) % 4],
                ),
            )
            ax.plot(range(len(losses)), losses, style, color=colour, lw=1.5, label=run["name"])
            bad = [k for k, x in enumerate(losses) if x != x or x in (float("inf"), float("-inf"))]
            ax.plot(bad, [1.0] * len(bad), "x", color=colour, ms=10, mew=2)
        ax.axvline(11, color="black", ls=":", lw=1)
        ax.text(11.2, 1.0, "step of the reported NaN\n(0.95 B, seq 2048)", fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(range(0, 21, 2))
        ax.set_xlabel("step")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("loss (log scale)")
    fig.tight_layout()
    return fig
