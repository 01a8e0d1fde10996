"""Chapter 1, "Tensor, pipeline and sequence parallel with HybridParallelPlugin": the layouts'
results read against their single-GPU references (:mod:`helpers.record.ch01` runs and records
them).

:func:`by_precision` sorts every layout's result into the fp32 layouts, which must follow their
reference step for step, the bf16 layouts, which follow it within rounding, and the run whose
causal mask went missing; :func:`matched` gives the numbers the page glues from them. Notebook 01
prints them and asserts, in its cell, what the chapter says of each.
"""

from __future__ import annotations

from helpers.record.ch01 import layout_result


def by_precision(runs: list[dict]) -> tuple[list[dict], list[dict], dict]:
    """(fp32 layouts, bf16 layouts, the run that expects to drift: the sdpa one); every layout
    must have a result."""
    layouts = {r["name"]: layout_result(r) for r in runs}
    assert all(layouts.values()), [k for k, v in layouts.items() if v is None]
    fp32 = [v for v in layouts.values() if v["precision"] == "fp32" and not v["expect_drift"]]
    bf16 = [v for v in layouts.values() if v["precision"] == "bf16"]
    [trap] = [v for v in layouts.values() if v["expect_drift"]]
    return fp32, bf16, trap


def matched(fp32: list[dict], bf16: list[dict]) -> dict[str, float]:
    """How closely the layouts followed their references, under the keys the page glues: the
    largest gap of the fp32 layouts, of the bf16 layouts over the steps they are checked on and
    over all steps, and the gap between the two references' last losses."""
    return {
        "ch01-fp32-max-diff": max(v["max_diff"] for v in fp32),
        "ch01-bf16-max-diff": max(v["max_diff"] for v in bf16),
        "ch01-bf16-window": max(v["checked_steps"] for v in bf16),
        "ch01-bf16-drift": max(v["max_diff_all"] for v in bf16),
        "ch01-ref-gap": abs(fp32[0]["reference"][-1] - bf16[0]["reference"][-1]),
    }
