"""The numbers Chapter 3's page quotes, computed, each under the key the page's ``{glue:text}``
pastes (``ch03-…``).

Used by ``notebooks/03_strategy.ipynb`` (which glues them with
:func:`helpers.chapters.ch03_strategy.glue_numbers`) and ``tests/test_ch03_page.py``. Sources: the
link table and node egress of :mod:`helpers.chapters.ch03_strategy`, the planner
(:mod:`helpers.cost.planner`, :mod:`helpers.cost.step_time`), the earlier planner of
:mod:`helpers.chapters.ch03_earlier`, Chapter 7's memory model
(:func:`helpers.cost.memory_plan.peak`) and the bubble of 1F1B
(:func:`helpers.parallel.pp.bubble_fraction`; Narayanan et al. 2021).
"""

from __future__ import annotations

from dataclasses import replace

from helpers.chapters.ch03_earlier import earlier_plan, earlier_seed_ranks
from helpers.chapters.ch03_strategy import egress_rows, layout_text, link_rows, ordinal
from helpers.cost import comm, memory_plan, planner
from helpers.cost.comm import NOMINAL_LINKS
from helpers.cost.planner import LLAMA2_70B, SEED_7B5
from helpers.cost.step_time import Hardware, Plan, members_per_node, plan_layout
from helpers.parallel.layouts import Layout
from helpers.parallel.pp import bubble_fraction

GIB = 2**30
OLD_PICK = Layout(128, 8, 1, microbatch=1, zero_stage=1)  # the earlier edition's 70 B pick


def _r(x: float, digits: int = 4) -> float:
    return round(float(x), digits)


def link_numbers(hw: Hardware = Hardware()) -> dict:
    """Step 2: the links, the 7.5 B model's gradient all-reduce across 4 nodes by T inside."""
    nv, ib = hw.intra.bandwidth_bytes_per_s, hw.inter.bandwidth_bytes_per_s
    rows = egress_rows(SEED_7B5, 32, hw, rounded=False)
    eg = {r["T"]: {k: v if isinstance(v, int) else _r(v) for k, v in r.items()} for r in rows}
    tp = [r for r in link_rows(SEED_7B5, hw, rounded=False) if r["traffic"].startswith("TP")]
    return {
        "ch03-nvlink-gbs": _r(nv / 1e9),
        "ch03-ib-gbs": _r(ib / 1e9),
        "ch03-nv-ib-ratio": _r(nv / ib),
        "ch03-node-cards": hw.gpus_per_node,
        "ch03-node-egress-gbs": _r(hw.gpus_per_node * ib / 1e9),
        "ch03-dp32-sent-gb": eg[1]["GB each rank sends"],
        "ch03-dp32-ms": eg[1]["ms"],
        "ch03-dp32-one-card-ms": eg[1]["ms, one card per rank"],
        "ch03-dp32-ratio": _r(eg[1]["ms, one card per rank"] / eg[1]["ms"]),
        "ch03-t2-members": eg[2]["members per node"],
        "ch03-t2-cards": eg[2]["cards per group"],
        "ch03-t2-sent-gb": eg[2]["GB each rank sends"],
        "ch03-t2-node-gb": eg[2]["GB leaving a node"],
        "ch03-t2-ms": eg[2]["ms"],
        "ch03-t2-one-card-ms": eg[2]["ms, one card per rank"],
        "ch03-tp-node-ms": _r(tp[0]["ms"]),  # one node, 2 nodes × 8, 8 nodes × 1
        "ch03-tp16-ms": _r(tp[1]["ms"]),
        "ch03-tp-one-card-ms": _r(tp[2]["ms"]),
        "ch03-tp-ops": 4 * SEED_7B5.layers,
        "ch03-ib-alpha-us": _r(hw.inter.latency_s * 1e6),
        "ch03-nv-alpha-us": _r(hw.intra.latency_s * 1e6),
    }


def seed_numbers(rows: list[dict] | None = None) -> dict:
    """The guide's twelve combinations, ranked by the planner now and by the earlier planner."""
    rows = rows or planner.seed_vs_planner()
    by = {r["dp×tp×pp"]: r for r in rows}
    ranked = sorted(rows, key=lambda r: r["planner rank"])
    earlier = earlier_seed_ranks()
    dp = by["32×1×1"]
    fits, _ = planner.plan(SEED_7B5, 32, 64, max_tp=8, max_pp=4)
    best = next(p for p in fits if (p.layout.dp, p.layout.sp_mode) == (32, None))
    window = (1 - 1 / 3) * best.compute_s / best.microbatches  # the last micro-batch's backward
    out = {
        "ch03-dp-rank": ordinal(dp["planner rank"]),
        "ch03-dp-rank-earlier": ordinal(earlier["32×1×1"]),
        "ch03-dp-gib": dp["memory GiB"],
        "ch03-dp-sharding": dp["planner"].split(",")[0],
        "ch03-dp-step-s": _r(best.step_s, 3),
        "ch03-dp-m": best.microbatches,
        "ch03-dp-window-ms": _r(window * 1e3, 1),
        "ch03-dp-exposed-ms": _r(best.dp_comm_s * 1e3, 1),
    }
    for i, r in enumerate(ranked[:3]):
        out[f"ch03-planner-{i + 1}"] = r["dp×tp×pp"]
        out[f"ch03-planner-{i + 1}-seed"] = ordinal(r["seed rank"])
    for combo, m in (("8×1×4", 64 // 8), ("16×1×2", 64 // 16)):
        key = combo.replace("×", "x")
        out[f"ch03-{key}-rank"] = ordinal(by[combo]["planner rank"])
        out[f"ch03-{key}-earlier"] = ordinal(earlier[combo])
        pp = int(combo.split("×")[2])
        out[f"ch03-{key}-bubble-pct"] = _r(100 * bubble_fraction(pp, m), 1)
    return out


def seed_lines(seed: dict, links: dict) -> list[str]:
    """What notebook 03 prints of pure data parallelism among the seed layouts (``seed``:
    :func:`seed_numbers`): its rank, and its gradient all-reduce across 4 nodes (``links``:
    :func:`link_numbers`) inside the last micro-batch's backward."""
    return [
        f"pure data parallelism ({seed['ch03-dp-sharding']}) ranks {seed['ch03-dp-rank']}: its "
        f"all-reduce ({links['ch03-dp32-ms']:.1f} ms) runs inside",
        f"  the last micro-batch's backward ({seed['ch03-dp-window-ms']:.1f} ms), "
        f"{seed['ch03-dp-exposed-ms']:.1f} ms exposed",
    ]


def memory_cases(fits: list[Plan], hw: Hardware = Hardware()) -> list[Plan]:
    """The 70 B plans whose memory the page breaks down: the planner's first three, the first's
    degrees with ZeRO-1 and with FSDP keeping the gathered weights, and the earlier pick."""
    first = fits[0].layout
    return fits[:3] + [
        plan_layout(LLAMA2_70B, replace(first, zero_stage=1, plugin="hybrid_parallel"), 1024, hw),
        plan_layout(LLAMA2_70B, replace(first, reshard_after_forward=False), 1024, hw),
        plan_layout(LLAMA2_70B, OLD_PICK, 1024, hw),
    ]


def _fsdp_overlap(p: Plan, hw: Hardware) -> dict:
    """FSDP's gathers and reduce-scatter per micro-batch against the micro-batch's forward and
    backward (Zhao et al. 2023, PyTorch FSDP, §3-4): the bf16 weights of one T-shard over D."""
    L, gpn = p.layout, hw.gpus_per_node
    k = members_per_node({"dp": L.dp, "pp": L.pp, "tp": L.tp, "sp": L.sp}, ("dp",), gpn)
    link = hw.link("all_gather", L.dp, k)
    shard = 2 * LLAMA2_70B.params / (L.tp * L.pp)
    gather = comm.collective_time("all_gather", shard, L.dp, link)
    scatter = comm.collective_time("reduce_scatter", shard, L.dp, link)
    per_mb = p.compute_s / p.microbatches
    return {
        "ch03-70b-first-members": k,
        "ch03-70b-first-cards": round(link.bandwidth_bytes_per_s / hw.inter.bandwidth_bytes_per_s),
        "ch03-70b-gather-s": _r(gather, 3),
        "ch03-70b-gather-scatter-s": _r(gather + scatter, 3),
        "ch03-70b-fwd-s": _r(per_mb / 3, 3),
        "ch03-70b-bwd-s": _r(2 * per_mb / 3, 3),
    }


def llama70b_numbers(hw: Hardware = Hardware()) -> dict:
    """Llama-2-70B on 1,024 GPUs: the planner's count, its first picks and their memory, the
    earlier pick and why it no longer fits, HSDP, and the calculator's exercise at 40 GiB."""
    fits, count = planner.plan(LLAMA2_70B, 1024, 1024, hw)
    old_fits, old_count = earlier_plan(LLAMA2_70B, 1024, 1024, hw)
    first, second, old = fits[0], fits[1], old_fits[0]
    mem = memory_plan.peak(LLAMA2_70B, first.layout, 1024, first.recompute)
    parts = {k: v / GIB for k, v in mem["prediction"]["breakdown"].items()}
    z1, kept, now = memory_cases(fits, hw)[3:]
    same = [i for i, p in enumerate(fits) if (p.layout.dp, p.layout.tp, p.layout.pp) == (128, 8, 1)]
    sg = next(i for i, p in enumerate(fits) if p.layout.sp_mode == "split_gather")
    hsdp = [L for L, _ in planner.enumerate_layouts(LLAMA2_70B, 1024, 1024) if L.shard_degree]
    small, small_count = planner.plan(LLAMA2_70B, 1024, 1024, replace(hw, memory_gib=40.0))
    return {
        "ch03-70b-count": count,
        "ch03-70b-fit": len(fits),
        "ch03-70b-earlier-count": old_count,
        "ch03-70b-earlier-fit": len(old_fits),
        "ch03-70b-first": layout_text(first.layout),
        "ch03-70b-first-sharding": first.layout.sharding,
        "ch03-70b-first-m": first.microbatches,
        "ch03-70b-first-tp": first.layout.tp,
        "ch03-70b-first-dp": first.layout.dp,
        "ch03-70b-first-gib": _r(first.memory_gib, 1),
        "ch03-70b-first-act-gib": _r(parts["activations"], 1),
        "ch03-70b-first-weights-gib": _r(parts["weights"], 1),
        "ch03-70b-first-states-gib": _r(
            parts["fp32 master"] + parts["Adam m, v"] + parts["grads, buckets"], 1
        ),
        "ch03-70b-first-step-s": _r(first.step_s, 2),
        "ch03-70b-first-z1-gib": _r(z1.memory_gib, 1),
        "ch03-70b-first-kept-gib": _r(kept.memory_gib, 1),
        **_fsdp_overlap(first, hw),
        "ch03-70b-second": layout_text(second.layout),
        "ch03-70b-second-sharding": second.layout.sharding,
        "ch03-70b-second-bubble-s": _r(second.bubble_s, 2),
        "ch03-70b-old": layout_text(old.layout),
        "ch03-70b-old-sharding": old.layout.sharding,
        "ch03-70b-old-m": old.microbatches,
        "ch03-70b-old-gib": _r(old.memory_gib, 1),
        "ch03-70b-old-now-gib": _r(now.memory_gib, 1),
        "ch03-70b-held-gib": _r(now.memory_gib - old.memory_gib, 1),
        "ch03-70b-same-rank": ordinal(same[0] + 1),
        "ch03-70b-same-sharding": fits[same[0]].layout.sharding,
        "ch03-70b-same-gib": _r(fits[same[0]].memory_gib, 1),
        "ch03-70b-sg-rank": ordinal(sg + 1),
        "ch03-70b-hsdp-layouts": len(hsdp),
        "ch03-70b-hsdp-gib": _r(16 * LLAMA2_70B.params / hw.gpus_per_node / GIB, 1),
        "ch03-ex6-fit": len(small),
        "ch03-ex6-count": small_count,
        "ch03-ex6-first": layout_text(small[0].layout),
        "ch03-ex6-first-sharding": small[0].layout.sharding,
        "ch03-ex6-first-m": small[0].microbatches,
        "ch03-ex6-second": layout_text(small[1].layout),
        "ch03-ex6-second-sharding": small[1].layout.sharding,
    }


def exercise_numbers(hw: Hardware = Hardware()) -> dict:
    """The answers of the numeric exercises (the node-egress one from :func:`link_numbers`)."""
    nv, ib = NOMINAL_LINKS["nvlink4"], NOMINAL_LINKS["ib_ndr"]
    h = 4096
    return {
        "ch03-ex1-gib": _r(comm.bytes_sent("all_reduce", 2 * GIB, 8) / GIB, 2),
        "ch03-ex1-nv-ms": _r(comm.collective_time("all_reduce", 2 * GIB, 8, nv) * 1e3, 2),
        "ch03-ex1-ib-ms": _r(comm.collective_time("all_reduce", 2 * GIB, 8, ib) * 1e3, 1),
        "ch03-ex3-tokens": f"{3 * h:,}",
        "ch03-ex5-m8-pct": _r(100 * bubble_fraction(4, 8), 1),
        "ch03-ex5-m32-pct": _r(100 * bubble_fraction(4, 32), 1),
    }


def validation_numbers(rows: list[dict]) -> dict:
    """How close Chapter 7's memory model came to the measured peaks of the eight 2-GPU layouts
    (``helpers.record.ch03_validation.validation_rows``), in %."""
    ok = [r for r in rows if r["measured ms"] != "failed"]
    err = {
        r["layout"]: 100 * (r["planner GiB"] - r["measured GiB"]) / r["measured GiB"] for r in ok
    }
    worst = max(err, key=lambda k: abs(err[k]))
    return {
        "ch03-val-layouts": len(ok),
        "ch03-val-worst-pct": _r(err[worst], 1),
        "ch03-val-bound-pct": float(int(max(abs(x) for x in err.values())) + 1),
        "ch03-val-within2": sum(abs(x) <= 2 for x in err.values()),
        "ch03-val-sg-pct": _r(-err["tp=2 + split_gather SP"], 1),
    }


def numbers(seed_rows: list[dict] | None = None) -> dict:
    """Every planner and link number the page quotes (not the recorded validation's)."""
    return link_numbers() | seed_numbers(seed_rows) | llama70b_numbers() | exercise_numbers()
