"""Chapter 3's decision flowchart for choosing a layout, built from the planner's own rules.

No box is typed here. :func:`flow` reads the stages from the objects the planner
(:func:`helpers.cost.planner.plan`) uses:

* the enumeration: the axes and ranges of :func:`helpers.cost.planner.enumerate_layouts`;
* one box per rule, labelled with the rule's name, in the order the planner tests them:
  :data:`helpers.parallel.layout_rules.LAYOUT_RULES` (through
  :func:`helpers.parallel.layouts.violations`), the interleaving check (labelled with the reason
  ``violations`` gives), then the ZeRO-3 rules of :data:`helpers.cost.planner.GEMINI_RULES`;
* the memory test against ``Hardware.memory_gib`` (Chapter 7's model), the step-time terms of a
  :class:`helpers.cost.step_time.Plan`, and the planner's first layout.

For one case (a model, G GPUs, a global batch, a :class:`~helpers.cost.step_time.Hardware`) each
box also counts the layouts it removes: the planner's enumeration is run with its filter switched
off, and each layout is charged to the first rule it breaks. :func:`figure` draws the result as a
snake of boxes: the tests of "does it fit?", then what each candidate costs, then the ranking.
"""

from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass, fields
from unittest import mock

import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

from helpers.parallel.layout_rules import LAYOUT_RULES, layout_case
from helpers.models.shape import ModelShape
from helpers.cost import planner
from helpers.cost.step_time import Hardware, Plan, plan_layout
from helpers.figures.style import DPI
from helpers.parallel.layouts import Layout, violations


@dataclass(frozen=True)
class Stage:
    """One box: its text, its kind (``start``, ``step``, ``rule`` or ``end``), and for a rule the
    candidates of the case it removed."""

    label: str
    kind: str
    dropped: int | None = None


@dataclass(frozen=True)
class Flow:
    """The stages in order, and the case's totals: candidates enumerated, candidates that pass
    every rule, candidates that fit, and what :func:`helpers.cost.planner.plan` itself returns for
    the case (its count of valid candidates and its plans that fit, fastest first)."""

    stages: list[Stage]
    enumerated: int
    valid: int
    fit: int
    planner_count: int
    planner_fits: list[Plan]


def _enumerate_all(model: ModelShape, G: int, B: int, hw: Hardware) -> list:
    """Every (layout, recompute) of the planner's enumeration, none dropped: the same loops, with
    the two filters it calls switched off for the count."""
    with (
        mock.patch.object(planner, "violations", lambda *a, **k: []),
        mock.patch.object(planner, "_gemini_breaks", lambda layout: False),
    ):
        return planner.enumerate_layouts(model, G, B, gpus_per_node=hw.gpus_per_node)


def _why(reason: str) -> str:
    return reason.split(": ", 1)[-1]


def _first_broken(layout: Layout, model: ModelShape, B: int) -> str | None:
    """The label of the first rule ``layout`` breaks, in the planner's order, or None."""
    case = layout_case(layout, model, B)
    for rule in LAYOUT_RULES:
        if rule.broken(case):
            return rule.name
    reasons = violations(layout, model, B)  # what is left: the interleaving check
    if reasons:
        return _why(reasons[0])
    if layout.zero_stage == 3:
        for rule in planner.GEMINI_RULES:
            if rule.broken(layout_case(layout)):
                return rule.name
    return None


def _rule_labels(model: ModelShape, B: int) -> list[str]:
    """Every rule box, in the planner's order; the interleaving check speaks through the reason
    ``violations`` gives a layout that breaks it (two chunks per stage, no pipeline)."""
    interleaving = _why(violations(Layout(1, chunks=2), model, B)[0])
    return [r.name for r in LAYOUT_RULES] + [interleaving] + [r.name for r in planner.GEMINI_RULES]


def _enumeration_label(n: int) -> str:
    sig = inspect.signature(planner.enumerate_layouts).parameters
    d = {k: v.default for k, v in sig.items()}
    return (
        f"enumerate D×T×P×S = G with T ≤ {d['max_tp']}, P ≤ {d['max_pp']}, S ≤ {d['max_sp']}, "
        f"b ∈ {d['microbatches']}, ZeRO ∈ {d['zero_stages']}, c ∈ {d['chunks']}, "
        f"recompute or not: {n:,} candidates"
    )


def flow(model: ModelShape, G: int, global_batch: int, hw: Hardware = Hardware()) -> Flow:
    """The planner's decision path for one case, with what each rule removes."""
    candidates = _enumerate_all(model, G, global_batch, hw)
    dropped: dict[str, int] = {}
    survivors = []
    for layout, rc in candidates:
        why = _first_broken(layout, model, global_batch)
        if why is None:
            survivors.append((layout, rc))
        else:
            dropped[why] = dropped.get(why, 0) + 1
    plans = [plan_layout(model, layout, global_batch, hw, rc) for layout, rc in survivors]
    too_big = sum(p.memory_gib > hw.memory_gib for p in plans)
    fits, count = planner.plan(model, G, global_batch, hw)

    terms = [f.name.removesuffix("_s") for f in fields(Plan) if f.name.endswith("_s")]
    parts = " + ".join(t.replace("_", " ") for t in terms if t != "step")
    where = f"{model.name}, G = {G} GPUs ({hw.gpus_per_node} per node), B = {global_batch}"
    stages = [Stage(where, "start"), Stage(_enumeration_label(len(candidates)), "step")]
    for name in _rule_labels(model, global_batch):
        stages.append(Stage(name, "rule", dropped.get(name, 0)))
    best = f"{fits[0].layout}, {fits[0].layout.sharding}" if fits else "none"
    link = "each group's link from its placement: NVLink inside a node, else network cards"
    stages += [
        Stage(f"peak memory ≤ {hw.memory_gib:g} GiB (Chapter 7's model)", "rule", too_big),
        Stage(link, "step"),
        Stage(f"step time = {parts}, at {hw.mfu:.0%} MFU", "step"),
        Stage("rank by step time; on a tie, less sharding first", "step"),
        Stage(f"first: {best}", "end"),
    ]
    return Flow(stages, len(candidates), len(survivors), len(plans) - too_big, count, fits)


COLOURS = {"start": "#DCE6F2", "step": "#EEEEEE", "rule": "#FFF4D6", "end": "#D9EAD3"}
ROW, DX, DY, W, H = 4, 3.3, 1.45, 3.0, 1.0  # boxes per row; spacing; box size (axis units)


def _positions(n: int) -> list[tuple[float, float]]:
    """Box centres of a snake ROW boxes wide: left to right, then right to left, and so on."""
    out = []
    for i in range(n):
        row, col = divmod(i, ROW)
        col = col if row % 2 == 0 else ROW - 1 - col
        out.append((col * DX, -row * DY))
    return out


def _box(ax, s: Stage, x: float, y: float) -> None:
    faint = s.kind == "rule" and not s.dropped
    patch = FancyBboxPatch((x - W / 2, y - H / 2), W, H, fc=COLOURS[s.kind], lw=1.0,
                           boxstyle="round,pad=0.03,rounding_size=0.12",
                           ec="#BBBBBB" if faint else "#555555")  # fmt: skip
    ax.add_patch(patch)
    text = textwrap.fill(s.label + ("\u00a0?" if s.kind == "rule" else ""), 34)
    ax.text(x, y + (0.08 if s.kind == "rule" else 0), text, ha="center", va="center",
            fontsize=9, color="#999999" if faint else "black")  # fmt: skip
    if s.kind == "rule":
        ax.text(x + W / 2 - 0.08, y - H / 2 + 0.06, f"✗ {s.dropped:,}", ha="right", va="bottom",
                fontsize=9, color="#BBBBBB" if faint else "#C44E52")  # fmt: skip


def _arrow(ax, a: tuple[float, float], b: tuple[float, float]) -> None:
    (x, y), (x2, y2) = a, b
    if y2 == y:
        d = 1 if x2 > x else -1
        start, end = (x + d * (W / 2 + 0.04), y), (x2 - d * (W / 2 + 0.04), y)
    else:
        start, end = (x, y - H / 2 - 0.04), (x2, y2 + H / 2 + 0.04)
    ax.annotate("", end, start, arrowprops=dict(arrowstyle="->", color="#555555", lw=1))


def figure(f: Flow):
    """The flowchart: rules (yellow) with the candidates of the case each removes (red ✗), steps
    (grey), the case (blue) and the planner's first layout (green); a rule that removes none of
    this case's candidates is drawn pale."""
    pos = _positions(len(f.stages))
    rows = (len(f.stages) + ROW - 1) // ROW
    fig, ax = plt.subplots(figsize=(11.5, 1.3 * rows + 0.6), dpi=DPI)
    for s, (x, y) in zip(f.stages, pos):
        _box(ax, s, x, y)
    for a, b in zip(pos, pos[1:]):
        _arrow(ax, a, b)
    ax.set_xlim(-W / 2 - 0.1, (ROW - 1) * DX + W / 2 + 0.1)
    ax.set_ylim(-(rows - 1) * DY - H / 2 - 0.1, H / 2 + 0.1)
    ax.axis("off")
    ax.set_title(
        f"{f.enumerated:,} candidates → {f.valid:,} pass every rule → {f.fit:,} fit → ranked by "
        "step time    (✗: the candidates that test removes)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
