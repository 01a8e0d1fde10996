"""Chapter 9, "Mixture of experts and expert parallelism": routed load and the recorded MoE runs.

Used by ``notebooks/09_quick_demos.ipynb``.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from helpers.chapters.ch09_records import failure_line, first_rank
from helpers.figures.style import DPI, RANK_COLOURS


def moe_load_figure(results: list[dict]):
    """Tokens routed to each expert, stacked by the rank they came from; the line is the capacity
    of one rank's group, so a bar segment above it is partly dropped."""
    experts = results[0]["experts"]
    fig, ax = plt.subplots(figsize=(6, 2.8), dpi=DPI)
    bottom = [0] * experts
    for r, colour in zip(results, RANK_COLOURS * 4):
        ax.bar(
            range(experts), r["routed"], bottom=bottom, color=colour, label=f"from rank {r['rank']}"
        )
        bottom = [b + x for b, x in zip(bottom, r["routed"])]
    ax.axhline(results[0]["capacity"], color="black", ls="--", lw=1, label="capacity per rank")
    owner = {e: r["rank"] for r in results for e in r["local_experts"]}
    ax.set_xticks(range(experts), [f"e{e}\n(rank {owner[e]})" for e in range(experts)], fontsize=7)
    ax.set_ylabel("tokens routed")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def moe_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = first_rank(run)
        if "tokens_per_s" not in r:
            rows.append({"run": run["name"], "tokens/s": failure_line(run)})
            continue
        rows.append(
            {
                "run": run["name"],
                "ep × moe_dp": f"{r['ep']} × {r['moe_dp']}",
                "ZeRO": r["zero"],
                "expert params held / total": f"{r['local_expert_params'] / 1e6:.0f} M / "
                f"{r['expert_params'] / 1e6:.0f} M",
                "tokens/s": f"{r['tokens_per_s']:,}",
                "peak GiB": f"{r['peak_mib'] / 1024:.1f}",
                "loss first→last": f"{r['losses'][0]:.3f}→{r['losses'][-1]:.3f}",
                "max |Δ| vs reference": f"{r['max_diff']:.1e}",
            }
        )
    return rows
