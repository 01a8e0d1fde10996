"""Chapter 9, "Hybrid parallelism: a Llama under HybridParallelPlugin": each layout's numbers.

Throughput, MFU, peak memory and losses of each recorded layout. Used by
``notebooks/09_quick_demos.ipynb`` (the table and the bar figure) and by
:mod:`helpers.chapters.ch02_combining` (the slowest rank, MFU).
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.chapters.ch09_records import failure_line, first_rank
from helpers.figures.style import DPI, RANK_COLOURS


def mfu_of(result: dict) -> float:
    """MFU recomputed with the book's definition (``helpers.demos.ch09_hybrid.mfu``, i.e.
    ``helpers.cost.mfu``) from the recorded tokens/s, GPU count, preset and length; the recorded
    ``mfu`` (rounded to 4 digits) where the result does not name its preset."""
    if "preset" not in result or "seq" not in result:
        return result["mfu"]
    from helpers.train.presets import PRESETS, mfu
    from helpers.models.llama import llama_config

    config = llama_config(**PRESETS[result["preset"]], max_seq=result["seq"])
    return mfu(config, result["seq"], result["tokens_per_s"], result["gpus"])


def slowest(run: dict) -> dict:
    """The result line of the rank with the fewest tokens/s: a step ends when every rank's does."""
    return min(
        (r for r in run.get("results", []) if "tokens_per_s" in r), key=lambda r: r["tokens_per_s"]
    )


def peak_gib(run: dict) -> float:
    """The largest peak memory of any rank of a run (pipeline stages differ), in GiB."""
    return max(r["peak_mib"] for r in run.get("results", []) if "peak_mib" in r) / 1024


def hybrid_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = first_rank(run)
        if "tokens_per_s" not in r:
            rows.append({"layout": run["name"], "tokens/s": failure_line(run)})
            continue
        ref, speed = r.get("reference") or [], slowest(run)
        rows.append(
            {
                "layout": run["name"],
                "GPUs": r["gpus"],
                "tokens/s (slowest rank)": f"{speed['tokens_per_s']:,}",
                "MFU": f"{100 * mfu_of(speed):.1f} %",
                "peak GiB (largest rank)": f"{peak_gib(run):.1f}",
                "loss first→last": f"{r['losses'][0]:.3f}→{r['losses'][-1]:.3f}",
                f"max |Δ| vs reference ({len(ref)} steps)": f"{r['max_diff']:.1e}"
                if ref
                else "n/a",
            }
        )
    return rows


def hybrid_figure(runs: list[dict]):
    """Tokens/s and MFU of each layout, as bars; one GPU in grey."""
    done = [(run["name"], slowest(run)) for run in runs if "tokens_per_s" in first_rank(run)]
    fig, (speed, util) = plt.subplots(
        1, 2, figsize=(9, 0.45 * len(done) + 1.2), dpi=DPI, sharey=True
    )
    colours = ["#8C8C8C" if r["gpus"] == 1 else RANK_COLOURS[0] for _, r in done]
    y = list(range(len(done)))[::-1]
    for ax, values, label, fmt in (
        (speed, [r["tokens_per_s"] for _, r in done], "tokens/s (all GPUs)", "{:,.0f}"),
        (util, [100 * mfu_of(r) for _, r in done], "MFU (%)", "{:.1f} %"),
    ):
        ax.barh(y, values, color=colours)
        for k, v in zip(y, values):
            ax.text(v, k, " " + fmt.format(v), va="center", fontsize=7)
        ax.set_xlim(0, 1.3 * max(values))
        ax.set_xlabel(label)
    speed.xaxis.set_major_formatter(lambda v, _: f"{v / 1000:.0f}k")
    speed.set_yticks(y, [name for name, _ in done], fontsize=8)
    fig.tight_layout()
    return fig
