"""The earlier edition of Chapter 3's planner, rebuilt from today's code with its two errors put
back, so the chapter can say what its advice used to be and why it changed.

Used by ``notebooks/03_strategy.ipynb`` ("What changed") and ``tests/test_ch03_page.py``. The
earlier step and memory models differed from :mod:`helpers.cost.step_time` in two terms:

* **one network card per rank**: every group that spans nodes was charged the bytes each of its
  ranks sends through one card of ``Hardware.inter``, whatever the placement
  (:class:`OneCardPerRank`). NCCL's rings and trees cross the network once per node per
  channel and spread the channels over the node's cards (nccl-tests ``doc/PERFORMANCE.md``;
  NVIDIA, "Doubling all2all performance with NCCL 2.12"), which
  :func:`helpers.cost.placement.spanning_link` models;
* **no gradients held across micro-batches without a pipeline**: with P = 1 and m > 1 the
  accumulated gradients live through every later micro-batch's forward
  (``helpers/cost/memory_llama.py``, ``predict``, the ``held`` term); the earlier model counted
  them only under 1F1B (:func:`without_held_gradients`).

It also knew fewer options: ZeRO 0-2 only (no ZeRO-3/FSDP forms) and no interleaved stages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from helpers.models.shape import ModelShape
from helpers.cost import memory_plan
from helpers.cost.comm import Link
from helpers.cost.memory_plan import GIB
from helpers.cost.planner import SEED_7B5, enumerate_layouts, seed_recommend
from helpers.cost.step_time import Hardware, Plan, plan_layout


@dataclass(frozen=True)
class OneCardPerRank(Hardware):
    """Hardware whose network gives every rank of a group that spans nodes one card, as the
    earlier model assumed: NVLink inside a node, ``inter`` for any group that leaves it."""

    def link(self, collective: str, n: int, per_node: int) -> Link:
        return self.intra if per_node >= n else self.inter


def one_card_per_rank(hw: Hardware) -> OneCardPerRank:
    """The same GPUs and links, networked as the earlier model assumed."""
    return OneCardPerRank(**{f: getattr(hw, f) for f in hw.__dataclass_fields__})


def without_held_gradients(model: ModelShape, plan: Plan, global_batch: int, hw: Hardware) -> Plan:
    """``plan`` with the memory the earlier model gave it: without a pipeline, the gradients
    accumulated across micro-batches left out of the forward and backward-start phases."""
    L = plan.layout
    if L.pp > 1 or plan.microbatches == 1:
        return plan
    mem = memory_plan.peak(model, L, global_batch, plan.recompute, hw.flash, hw.overhead_gib)
    pred = mem["prediction"]
    held = pred["states"]["grads"]
    phases = dict(pred["phases"])
    for phase in ("forward", "backward_start"):
        phases[phase] -= held
    return replace(plan, memory_gib=(max(phases.values()) + mem["outside"]) / GIB)


def earlier_plan(
    model: ModelShape, G: int, global_batch: int, hw: Hardware = Hardware(), **limits
) -> tuple[list[Plan], int]:
    """The earlier planner's answer: (plans that fit, fastest first; layouts enumerated)."""
    old = one_card_per_rank(hw)
    layouts = enumerate_layouts(
        model,
        G,
        global_batch,
        zero_stages=(0, 1, 2),
        chunks=(1,),
        gpus_per_node=hw.gpus_per_node,
        **limits,
    )
    plans = [
        without_held_gradients(
            model, plan_layout(model, L, global_batch, old, rc), global_batch, hw
        )
        for L, rc in layouts
    ]
    fits = [p for p in plans if p.memory_gib <= hw.memory_gib]
    fits.sort(key=lambda p: (p.step_s, p.memory_gib))
    return fits, len(layouts)


def earlier_seed_ranks(
    model: ModelShape = SEED_7B5, G: int = 32, global_batch: int = 64, hw: Hardware = Hardware()
) -> dict[str, int]:
    """The earlier planner's rank of each of the guide's (D, T, P), as "D×T×P": its best plan
    without an own sequence axis, ranked by step time (as
    :func:`helpers.cost.planner.seed_vs_planner` ranks them today)."""
    fits, _ = earlier_plan(model, G, global_batch, hw, max_tp=8, max_pp=4)
    best: dict[tuple[int, int, int], Plan] = {}
    for p in fits:
        if p.layout.sp == 1 and p.layout.sp_mode is None:
            best.setdefault((p.layout.dp, p.layout.tp, p.layout.pp), p)
    order = sorted(best, key=lambda k: best[k].step_s)
    combos = [(dp, tp, pp) for _, dp, tp, pp, _ in seed_recommend(G, round(model.params / 1e9, 1))]
    return {f"{dp}×{tp}×{pp}": order.index((dp, tp, pp)) + 1 for dp, tp, pp in combos}
