"""Figures of Chapters 6 and 8's recorded GPU runs (``helpers.record.ch08``): the framework
comparison, the one-knob-at-a-time tuning with each rank's profiler split, and the out-of-memory
lab.

Used by ``notebooks/06_frameworks.ipynb`` and ``notebooks/08_troubleshooting.ipynb``; every bar is a
number of the record, read through :func:`helpers.chapters.ch08_troubleshooting.point`. A run whose
loss is not valid (:func:`helpers.train.reference.loss_verdict`) is drawn hatched and grey: its
speed does not count.
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt

from helpers.figures.style import DPI, RANK_COLOURS

INVALID = dict(color="#BBBBBB", hatch="//", edgecolor="#555555")


def _label(name: str, width: int = 14, cut: bool = True) -> str:
    return "\n".join(textwrap.wrap(name.split(" (")[0] if cut else name, width))


def compare_figure(points: list[dict]):
    """Tokens/s per GPU, MFU and peak memory per framework; invalid runs hatched."""
    runs = [p for p in points if not p.get("failed") and not p.get("oom")]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), dpi=DPI)
    values = [
        ("tokens/s per GPU (thousands)", lambda p: p["tokens_per_s_per_gpu"] / 1000),
        ("MFU (%)", lambda p: 100 * p["mfu"]),
        ("peak memory per GPU (GiB)", lambda p: p["peak_gib"]),
    ]
    for ax, (ylabel, value) in zip(axes, values):
        for k, p in enumerate(runs):
            style = dict(color=RANK_COLOURS[k]) if p["valid"] else INVALID
            ax.bar(k, value(p), **style)
            ax.text(k, value(p), f"{value(p):.1f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(runs)), [_label(p["name"]) for p in runs], fontsize=7)
        ax.set_ylabel(ylabel)
    bad = [p for p in runs if not p["valid"]]
    if bad:
        axes[0].set_title(
            "hatched: " + "; ".join(f"{p['name'].split(' (')[0]}, {p['reason']}" for p in bad),
            fontsize=8,
        )
    fig.tight_layout()
    return fig


def tune_figure(points: list[dict]):
    """Left: MFU of each tuning step. Right: each rank's profiled compute, hidden and exposed
    communication per step (ms), with the timed step as a black tick."""
    runs = [p for p in points if not p.get("failed") and not p.get("oom")]
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(13, 4.4), dpi=DPI, gridspec_kw={"width_ratios": [1.2, 1.3]}
    )
    for k, p in enumerate(runs):
        left.barh(k, 100 * p["mfu"], color=RANK_COLOURS[0])
        left.text(
            100 * p["mfu"],
            k,
            f" {100 * p['mfu']:.1f} %, {p['tokens_per_s'] / 1000:.0f}k tokens/s",
            va="center",
            fontsize=7,
        )
    left.set_yticks(
        range(len(runs)),
        [f"{k}. {_label(p['name'], 30, cut=False)}" for k, p in enumerate(runs)],
        fontsize=7,
    )
    left.invert_yaxis()
    left.set_xlabel("MFU (%)")
    left.set_xlim(0, 1.6 * max(100 * p["mfu"] for p in runs))
    width, shown = 0.38, set()
    for k, p in enumerate(runs):
        step_ms = 1000 * p["seconds_per_step"]
        for rank, q in enumerate(p["profiles"]):
            if not q:
                continue
            x = k + (rank - 0.5) * width
            parts = [
                ("compute", q["compute_ms"], RANK_COLOURS[0]),
                (
                    "communication under compute",
                    q["comm_ms"] - q["exposed_comm_ms"],
                    RANK_COLOURS[2],
                ),
                ("exposed communication", q["exposed_comm_ms"], RANK_COLOURS[3]),
            ]
            bottom = 0.0
            for label, ms, colour in parts:
                right.bar(
                    x,
                    ms,
                    width,
                    bottom=bottom,
                    color=colour,
                    label=None if label in shown else label,
                )
                shown.add(label)
                bottom += ms
            right.text(x, bottom, f"r{rank}", ha="center", va="bottom", fontsize=6)
        right.plot(
            [k - width, k + width],
            [step_ms] * 2,
            color="black",
            lw=2,
            label=None if "step" in shown else "timed step",
        )
        shown.add("step")
    right.set_xticks(range(len(runs)), [str(k) for k in range(len(runs))])
    right.set_xlabel("tuning step (bars: rank 0, rank 1)")
    right.set_ylabel("ms per step (profiled)")
    right.legend(fontsize=7)
    fig.tight_layout()
    return fig


def oom_figure(rows: list[dict], cap_gib: float, tokens: dict[str, float]):
    """Predicted vs measured peak per layout against the cap, and each layout's tokens/s."""
    fig, (mem, speed) = plt.subplots(
        1, 2, figsize=(11, 3.4), dpi=DPI, gridspec_kw={"width_ratios": [1.6, 1]}
    )
    for k, r in enumerate(rows):
        mem.bar(
            k - 0.2,
            r["predicted GiB"],
            0.4,
            color=RANK_COLOURS[0],
            label="predicted (Chapter 7)" if k == 0 else None,
        )
        oom = r["outcome"] == "out of memory"
        mem.bar(
            k + 0.2,
            r["measured peak GiB"],
            0.4,
            **(INVALID if oom else dict(color=RANK_COLOURS[1])),
            label="measured peak" if k == 0 else None,
        )
        if oom:
            mem.text(
                k + 0.2,
                r["measured peak GiB"],
                "OOM",
                ha="center",
                va="bottom",
                fontsize=8,
                color="red",
            )
    mem.axhline(cap_gib, color="red", ls="--", lw=1, label=f"cap {cap_gib} GiB")
    short = lambda name: name.replace(" (HybridParallel tp=1)", "").replace(" (LowLevelZero)", "")  # noqa: E731
    mem.set_xticks(
        range(len(rows)), [_label(short(r["run"]), 16, cut=False) for r in rows], fontsize=7
    )
    mem.set_ylabel("GiB per GPU")
    mem.set_ylim(0, 1.3 * max(max(r["predicted GiB"], r["measured peak GiB"]) for r in rows))
    mem.legend(fontsize=7, loc="upper right", ncol=3)
    names = list(tokens)
    speed.bar(range(len(names)), [tokens[n] / 1000 for n in names], color=RANK_COLOURS[2])
    for k, n in enumerate(names):
        speed.text(
            k, tokens[n] / 1000, f"{tokens[n] / 1000:.1f}k", ha="center", va="bottom", fontsize=8
        )
    speed.set_xticks(
        range(len(names)), [_label(short(n), 14, cut=False) for n in names], fontsize=7
    )
    speed.set_ylabel("tokens/s (2 GPUs, thousands)")
    fig.tight_layout()
    return fig
