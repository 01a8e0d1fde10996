"""Chapter 9, "Mixture of experts and expert parallelism": routed load, the all-to-all bytes and
saved buffers counted in the CPU demo against :mod:`helpers.cost.moe`, and the recorded MoE runs.
The routed load is drawn by :func:`helpers.figures.ch09_moe.moe_load_figure`.

Used by ``notebooks/09_quick_demos.ipynb`` and ``tests/test_ch09_moe_balance.py``.
"""

from __future__ import annotations

from helpers.chapters.ch09_records import failure_line, first_rank
from helpers.cost.moe import buffer_slots, dispatch_bytes
from helpers.run.result_types.ch09 import MoeResult


def bytes_rows(results: list[MoeResult]) -> list[dict]:
    """Per rank: the bytes its all-to-alls handed to gloo for other ranks, forward and backward,
    against two all-to-alls of :func:`helpers.cost.moe.dispatch_bytes` each (dispatch and combine;
    backward: their gradients)."""
    rows = []
    for r in results:
        one = dispatch_bytes(r["tokens"], r["k"], r["hidden"], r["experts"], r["ep"],
                             r["capacity_factor"], r["element_size"])  # fmt: skip
        for phase in ("forward", "backward"):
            sent = r["sent"][phase]
            rows.append(
                {
                    "rank": r["rank"],
                    "phase": phase,
                    "all-to-alls": r["all_to_alls"][phase],
                    "bytes to each peer": ", ".join(f"{b:,}" for b in sent),
                    "sent (counted)": sum(sent),
                    "2 × (E-1)/E · n_exp·C·h·e": 2 * one,
                    "equal": sum(sent) == 2 * one,
                }
            )
    return rows


def saved_growth(low: list[dict], high: list[dict]) -> dict:
    """Two runs of the demo that differ only in the capacity factor (and drop nothing): how many
    more bytes autograd saved in the layer's forward, against the capacity buffers' n_exp·ΔC·
    (h + 2·f)·e (the experts' input and their GELU's input and output, per slot)."""
    a, b = low[0], high[0]
    slots = (buffer_slots(b["tokens"], b["k"], b["experts"], b["capacity_factor"])
             - buffer_slots(a["tokens"], a["k"], a["experts"], a["capacity_factor"]))  # fmt: skip
    formula = slots * (a["hidden"] + 2 * a["ffn"]) * a["element_size"]
    counted = {r["saved_bytes"] - s["saved_bytes"] for r, s in zip(high, low)}
    return {"slots": slots, "counted": sorted(counted), "formula": formula}


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
