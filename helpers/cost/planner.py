"""The layout planner: enumerate every layout of G GPUs, drop what does not fit, rank by step time.

Used by Chapter 3 (strategy) and its calculator (:mod:`helpers.notebook.widgets`). The seed
(策略选择方法) ranks (dp, tp, pp) by a score (tp-1) + (pp-1)/2 and prints a memory figure it never
checks (:func:`seed_recommend`, reproduced from its ``recommend``). The planner replaces the score
by a time estimate built from the book's models, each with its source:

* layouts and their validity: :mod:`helpers.parallel.layouts` (G = D×T×P×S, head/layer
  divisibility, ZeRO ≤ 1 with a pipeline, 1F1B's m ≥ P);
* memory per GPU and step time: :mod:`helpers.cost.step_time` (ZeRO model states, Korthikanti
  activations, FLOPs at an assumed MFU, α-β communication by tier, the 1F1B bubble); a layout that
  does not fit ``Hardware.memory_gib`` is dropped.

    python -m helpers.cost.planner --bench     # every layout of a 70 B model on 1,024 GPUs
"""

from __future__ import annotations

import argparse
import time

from helpers.parallel.layout_rules import GEMINI_RULES, layout_case
from helpers.models.shape import ModelShape
from helpers.cost.memory import GIB, seed_estimate_memory
from helpers.cost.step_time import Hardware, Plan, plan_layout
from helpers.parallel.factors import divisors
from helpers.parallel.layouts import Layout, factor_parallelism, violations

LLAMA2_70B = ModelShape.llama(80, 8192, 64, 8, 32000, 28672, seq_len=4096, name="Llama-2-70B")
SEED_7B5 = ModelShape.llama(36, 4096, 32, 32, 32000, 11008, seq_len=2048, name="7.5 B Llama-style")
VALIDATION_0B5 = ModelShape.llama(
    8, 2048, 16, 16, 32000, 5504, seq_len=1024, name="0.54 B Llama (Chapter 3's 2-GPU runs)"
)


def enumerate_layouts(
    model: ModelShape,
    G: int,
    global_batch: int,
    max_tp: int = 16,
    max_pp: int = 16,
    max_sp: int = 8,
    microbatches=(1, 2, 4, 8),
    zero_stages=(0, 1, 2, 3),
    chunks=(1, 2),
    gpus_per_node: int = 8,
) -> list[tuple[Layout, bool]]:
    """Every (layout, recompute) the rules of :func:`helpers.parallel.layouts.violations` allow.

    ZeRO-3 comes in three forms (:func:`sharding_forms`): FSDP resharding after the forward,
    FSDP keeping the gathered weights until the backward, and HSDP sharding inside a node and
    replicating across nodes. Pipelines also run interleaved with each of ``chunks``."""
    out = []
    for tp in divisors(G, max_tp):
        for pp in divisors(G // tp, max_pp):
            for mode in (None, "split_gather", "all_to_all"):
                for sp in divisors(G // (tp * pp), max_sp)[1:] if mode == "all_to_all" else [1]:
                    dp = G // (tp * pp * sp)
                    for mb in microbatches:
                        for zero in zero_stages:
                            for form in sharding_forms(zero, dp, tp * pp * sp, gpus_per_node):
                                for v in chunks if pp > 1 else (1,):
                                    plugin = "gemini" if zero == 3 else "hybrid_parallel"
                                    layout = Layout(
                                        dp, tp, pp, sp, mode, mb, zero, *form, v, plugin
                                    )
                                    if violations(layout, model, global_batch) or (
                                        zero == 3 and _gemini_breaks(layout)
                                    ):
                                        continue
                                    out += [(layout, False), (layout, True)]
    return out


def _gemini_breaks(layout: Layout) -> bool:
    """Whether a ZeRO-3 layout breaks a rule of GeminiPlugin (no pipeline, no sequence modes)."""
    case = layout_case(layout)
    return any(rule.broken(case) for rule in GEMINI_RULES)


def sharding_forms(
    zero: int, dp: int, inner: int, gpus_per_node: int
) -> list[tuple[bool, int | None]]:
    """(reshard_after_forward, shard_degree) of each ZeRO-3 form for a data group of ``dp`` ranks
    whose stride is ``inner`` = T·P·S: FSDP, FSDP kept after forward, and HSDP when the data ranks
    of one node are fewer than D (shard over them, replicate across nodes)."""
    if zero < 3:
        return [(True, None)]
    forms = [(True, None), (False, None)]
    local = max(1, gpus_per_node // inner)
    if 1 < local < dp:
        forms.append((True, local))
    return forms


def plan(
    model: ModelShape, G: int, global_batch: int, hw: Hardware = Hardware(), **limits
) -> tuple[list[Plan], int]:
    """(plans that fit, fastest first; how many layouts were enumerated)."""
    # [start: plan]
    candidates = enumerate_layouts(model, G, global_batch, gpus_per_node=hw.gpus_per_node, **limits)
    plans = [plan_layout(model, layout, global_batch, hw, rc) for layout, rc in candidates]
    fits = [p for p in plans if p.memory_gib <= hw.memory_gib]
    # equal times (all communication hidden): the layout that moves and shards less comes first
    fits.sort(key=lambda p: (p.step_s, p.layout.zero_stage, p.memory_gib))
    return fits, len(candidates)
    # [end: plan]


# --- the seed's recommend, and what the planner says about the same combinations ----------------


def seed_recommend(
    total_gpus: int, param_billions: float
) -> list[tuple[float, int, int, int, float]]:
    """The seed's ``recommend``: (score, dp, tp, pp, GB) sorted, score = (tp-1)·1.0 + (pp-1)·0.5."""
    scored = [
        ((tp - 1) * 1.0 + (pp - 1) * 0.5, dp, tp, pp, seed_estimate_memory(param_billions, tp, pp))
        for dp, tp, pp in factor_parallelism(total_gpus)
    ]
    scored.sort()
    return scored


def seed_report(total_gpus: int = 32, param_billions: float = 7.5, top: int = 8) -> str:
    """The seed's ``main()`` output, line for line."""
    lines = [f"{total_gpus}卡训练{param_billions}B模型的可行并行组合(按通信开销排序):"]
    for comm, dp, tp, pp, mem in seed_recommend(total_gpus, param_billions)[:top]:
        lines.append(
            f"数据并行{dp} x 张量并行{tp} x 流水线并行{pp} | "
            f"单卡显存约 {mem:.1f} GB | 通信代价 {comm:.1f}"
        )
    return "\n".join(lines)


def seed_vs_planner(
    model: ModelShape = SEED_7B5, G: int = 32, global_batch: int = 64, hw: Hardware = Hardware()
) -> list[dict]:
    """Each of the seed's (dp, tp, pp), in the seed's order, with the planner's best way to run
    it."""
    fits, _ = plan(model, G, global_batch, hw, max_tp=8, max_pp=4)
    best: dict[tuple[int, int, int], Plan] = {}
    for (
        p
    ) in fits:  # fastest first: the first plan of a (dp, tp, pp) without an own sp axis is its best
        key = (p.layout.dp, p.layout.tp, p.layout.pp)
        if p.layout.sp == 1 and p.layout.sp_mode is None:
            best.setdefault(key, p)
    order = sorted(best, key=lambda k: best[k].step_s)
    rows = []
    for i, (score, dp, tp, pp, mem) in enumerate(seed_recommend(G, round(model.params / 1e9, 1))):
        p = best.get((dp, tp, pp))
        rows.append(
            {
                "seed rank": i + 1,
                "dp×tp×pp": f"{dp}×{tp}×{pp}",
                "seed score": score,
                "seed GB": round(mem, 1),
                "seed fits": "yes" if mem * 1e9 <= hw.memory_gib * GIB else "no",
                "planner": (
                    f"{p.layout.sharding}, mb {p.layout.microbatch}"
                    + ("" if p.recompute == "none" else f", {p.recompute} recompute")
                )
                if p
                else "does not fit",
                "memory GiB": round(p.memory_gib, 1) if p else "-",
                "step s": round(p.step_s, 3) if p else "-",
                "planner rank": order.index((dp, tp, pp)) + 1 if p else "-",
            }
        )
    return rows


def bench(
    G: int = 1024,
    model: ModelShape = LLAMA2_70B,
    global_batch: int = 1024,
    hw: Hardware = Hardware(),
) -> tuple[int, int, float]:
    """(layouts enumerated, layouts that fit, seconds) for ranking every layout of ``model`` on G
    GPUs."""
    t0 = time.perf_counter()
    fits, count = plan(model, G, global_batch, hw)
    return count, len(fits), time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--bench", action="store_true", help="rank every layout of a 70 B model on 1,024 GPUs"
    )
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()
    if args.bench:
        count, fit, seconds = bench()
        print(
            f"{LLAMA2_70B.name} ({LLAMA2_70B.params / 1e9:.1f} B) on 1024 GPUs, "
            "global batch 1024 × 4096 tokens: "
            f"{count} layouts enumerated, {fit} fit in 80 GiB, ranked in {seconds:.3f} s"
        )
        fits, _ = plan(LLAMA2_70B, 1024, 1024)
        for p in fits[: args.top]:
            print(p.row(1024 * 4096))
    else:
        print(seed_report())


if __name__ == "__main__":
    main()
