"""The numbers Chapter 3's page quotes from its GPU records, each under the key the page's
``{glue:text}`` pastes (``ch03-…``).

Used by ``notebooks/03_strategy.ipynb``, which glues them, and ``tests/test_ch03_page.py``. Three
records (``results/2xNVIDIA-H200/ch03_*.json``): the collectives timed on two H200 GPUs and the
link calibrated on them (:mod:`helpers.cost.calibration`), the communication share of real
training steps (:mod:`helpers.record.ch03`), and the eight layouts that check the planner's order
(:mod:`helpers.record.ch03_validation`). The ``outside the allocator`` numbers come from Chapter 7's
memory records (:mod:`helpers.record.ch07_tables`).
"""

from __future__ import annotations

from helpers.cost.comm import NOMINAL_LINKS
from helpers.cost import calibration
from helpers.run.result_types.ch03 import ShareResult

MIB, GIB = 2**20, 2**30


def _r(x: float, digits: int = 1) -> float:
    return round(float(x), digits)


def _span(values) -> str:
    """``'25–34'``: the smallest and largest of ``values``, rounded to whole numbers."""
    values = list(values)
    lo, hi = round(min(values)), round(max(values))
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def collective_numbers(measured: list[dict]) -> dict:
    """The NCCL calibration: the fitted link, the flat small-message times, the worst held-out
    errors of the host-floor model and of the plain α-β model, the bus bandwidths at 1 GiB."""
    table, link = calibration.collective_table(measured)
    naive, _ = calibration.collective_table(measured, "alpha_beta")
    held = [r for r in table if r["size_bytes"] >= MIB and r["role"] == "held out"]
    worst = calibration.worst_error(table)
    big = calibration.worst_error(table, 16 * MIB)
    flat = {}
    for c in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        flat[f"ch03-flat-{c.replace('_', '-')}-us"] = _span(
            r["measured us"] for r in table if r["collective"] == c and r["size_bytes"] <= 4 * MIB
        )
    busbw = {
        f"ch03-busbw-1g-{r['collective'].replace('_', '-')}": _r(r["busbw GB/s"], 0)
        for r in table
        if r["size_bytes"] == GIB
    }
    by = {(r["collective"], r["size"]): r for r in naive}
    beta = link.bandwidth_bytes_per_s
    return {
        "ch03-alpha-us": _r(link.latency_s * 1e6),
        "ch03-beta-gbs": _r(beta / 1e9, 0),
        "ch03-beta-nominal-pct": _r(100 * beta / NOMINAL_LINKS["nvlink4"].bandwidth_bytes_per_s, 0),
        "ch03-4mib-us": _r(4 * MIB / beta * 1e6, 0),
        "ch03-held": len(held),
        "ch03-held-within": sum(abs(r["error %"]) <= 25 for r in held),
        "ch03-worst-pct": worst["error %"],
        "ch03-worst-pred-us": worst["predicted us"],
        "ch03-worst-meas-us": worst["measured us"],
        "ch03-worst16-pct": big["error %"],
        "ch03-naive-a2a-pct": -by[("all_to_all", "1M")]["error %"],
        "ch03-naive-ag-pct": by[("all_gather", "4M")]["error %"],
        **flat,
        **busbw,
    }


def share_numbers(results: list[ShareResult], allreduce_s: float) -> dict:
    """The communication share of the recorded steps (``ch03_share``): its range, each layout's
    share and throughput per batch, the step times at small batches, and the gradient all-reduce
    of ``dp`` at batch 32 beside ``allreduce_s``, what the calibrated model gives for it."""
    res = {(r["layout"], r["global_batch"]): r for r in results}
    small = [r for (_, b), r in res.items() if b < 32]
    out = {
        "ch03-share-min": _r(min(r["share"] for r in results), 2),
        "ch03-share-max": _r(max(r["share"] for r in results), 2),
        "ch03-grad-mb": _r(res[("dp", 32)]["comm_bytes"] / 1e6, 0),
        "ch03-grad-model-ms": _r(allreduce_s * 1e3, 2),
        "ch03-dp32-exposed-ms": _r(res[("dp", 32)]["t_comm"] * 1e3, 2),
        "ch03-small-step-ms": _span(r["t_step"] * 1e3 for r in small),
        "ch03-small-steps-ms": _span(
            s * 1e3 for r in small for s in r["steps_on"] + r["steps_off"]
        ),
        "ch03-dp32-step-ms": _r(res[("dp", 32)]["t_step"] * 1e3),
    }
    for (layout, batch), r in res.items():
        out[f"ch03-share-{layout}-{batch}"] = _r(r["share"], 2)
        out[f"ch03-ktok-{layout}-{batch}"] = _r(r["tokens_per_s"] / 1e3, 0)
    return out


def validation_record_numbers(rows: list[dict], spearman: float, mfu: float) -> dict:
    """The eight 2-GPU layouts against the planner: rank agreement, the pipelines' times and
    bubbles, recomputation against plain data parallelism, how far below the measured times the
    planner's are, and the measured MFU of ``dp=2`` (``mfu``)."""
    by = {r["layout"]: r for r in rows}
    below = {r["layout"]: 100 * (1 - r["planner ms"] / r["measured ms"]) for r in rows}
    others = [v for k, v in below.items() if k != "pp=2, m=8"]
    return {
        "ch03-val-spearman": _r(spearman, 2),
        "ch03-val-pp8-ms": _r(by["pp=2, m=8"]["measured ms"], 0),
        "ch03-val-pp4-ms": _r(by["pp=2, m=4"]["measured ms"], 0),
        "ch03-val-recompute-x": _r(
            by["dp=2 + recompute"]["measured ms"] / by["dp=2"]["measured ms"], 2
        ),
        "ch03-val-below-pct": _span(others),
        "ch03-val-below-pp8-pct": _r(below["pp=2, m=8"], 0),
        "ch03-val-mfu-pct": _r(100 * mfu, 1),
    }


def outside_allocator_numbers() -> dict:
    """The most memory outside PyTorch's allocator (CUDA context, NCCL, kernels) that Chapter 7
    measured, on two H200 GPUs and on one, in GiB: what the planner's constant rounds up."""
    from helpers.record.ch07_tables import measured_rows
    from helpers.record.results import load

    out = {}
    for gpus in (2, 1):
        rows = measured_rows(load("ch07_memory", gpus=gpus))
        worst = max(r["outside_allocator"] for r in rows if r["outside_allocator"])
        out[f"ch03-outside-{gpus}gpu-gib"] = _r(worst / GIB, 2)
    return out


def held_out_lines(big: list[dict], worst: dict, gpu_bound: dict, at_1g: dict) -> list[str]:
    """What notebook 03 prints of the calibration: the held-out rows from 1 MiB up (``big``) and
    how many are within ±25 %, the worst of them (``worst``) and the worst from 16 MiB up
    (``gpu_bound``), rows of :func:`helpers.cost.calibration.collective_table`, and the bus
    bandwidth of each collective at 1 GiB (``at_1g``, GB/s)."""
    return [
        f"held-out messages >= 1 MiB: {len(big)} rows, "
        f"{sum(abs(r['error %']) <= 25 for r in big)} within ±25 %",
        f"worst: {worst['collective']} at {worst['size']}: predicted {worst['predicted us']} µs, "
        f"measured {worst['measured us']} µs ({worst['error %']:+.1f} %)",
        f"worst from 16 MiB up: {gpu_bound['collective']} at {gpu_bound['size']} "
        f"({gpu_bound['error %']:+.1f} %)",
        "bus bandwidth at 1 GiB, GB/s: " + ", ".join(f"{c} {v:.0f}" for c, v in at_1g.items()),
    ]


def outside_lines(outside: dict) -> list[str]:
    """What notebook 03 prints of the memory outside the allocator: what the planner adds beside
    the most that Chapter 7 measured (:func:`outside_allocator_numbers`), GiB."""
    return [
        f"outside the allocator: the planner adds {outside['ch03-outside-gib']} GiB; Chapter 7 "
        f"measured at most {outside['ch03-outside-2gpu-gib']} GiB",
        f"  on 2 GPUs and {outside['ch03-outside-1gpu-gib']} GiB on 1 GPU",
    ]
