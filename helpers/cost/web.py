"""The calculator page's entry: a dict of settings in, a JSON-able dict of the book's numbers out.

Used by ``book/calculator.md``, where Pyodide runs this module and the modules it imports in the
reader's browser (``helpers.chapters.calculator`` packs them at build time), and by
``tests/test_calculator.py`` in CPython. Nothing is computed here: :func:`calculate` builds a
:class:`helpers.models.shape.ModelShape`, a :class:`helpers.cost.step_time.Hardware` and a
:class:`helpers.parallel.layouts.Layout` from the settings and asks

* :func:`helpers.cost.memory_plan.peak` for the busiest rank's memory (Chapter 7's model, its
  breakdown at the peak, plus what the allocator never sees);
* :func:`helpers.cost.step_time.plan_layout` for the step time (Chapter 3's model) and
  :func:`helpers.cost.practice.step_mfu` for its MFU;
* :func:`helpers.parallel.layouts.violations` and, for ZeRO-3,
  :data:`helpers.parallel.layout_rules.GEMINI_RULES` for the rules Colossal-AI would enforce (the
  numbers are computed anyway, as Chapter 12 does for published runs);
* :func:`helpers.cost.planner.plan` for every layout of the same model, GPUs and global batch,
  ranked (cached: a change of T, P or S alone does not rank again).

Every number the page prints comes with its text, formatted here, so the browser prints what
CPython prints. Settings (all optional but the model's): ``layers hidden heads kv_heads ffn vocab
seq style name`` (the model), ``hw G node mem eff flash`` (the cluster: a preset of
:data:`HARDWARE`, GPUs, GPUs per node, GiB per GPU, compute efficiency, flash attention), ``T P S
sp v zero fsdp shard b B m rc pr top`` (the layout: degrees, sequence mode, interleaved chunks,
ZeRO stage, the ZeRO-3 form, the HSDP shard group, micro-batch, global batch in sequences, or
accumulation steps instead of B, recomputation, precision, planner rows shown).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from inspect import signature

from helpers.cost.hardware import GPU_KIND, PRESETS
from helpers.cost.memory_plan import GIB, RECOMPUTE_MODES, peak
from helpers.cost.planner import enumerate_layouts, plan
from helpers.cost.practice import step_mfu
from helpers.cost.step_time import Hardware, plan_layout
from helpers.models.shape import ModelShape
from helpers.parallel.layout_rules import GEMINI_RULES, layout_case
from helpers.parallel.layouts import Layout, violations

HARDWARE: dict[str, tuple[str, Hardware]] = {
    "nominal": ("H100/H200 SXM, nominal links", Hardware()),
    **{k: (f"{GPU_KIND[k]}, {k}", hw) for k, hw in PRESETS.items()},
}
SP_MODES = ("none", "split_gather", "all_to_all")  # the modes the step model times
FSDP_FORMS = ("reshard", "keep", "hsdp")  # ZeRO-3: FSDP, FSDP kept after forward, HSDP
DEFAULTS = {
    "style": "llama",
    "name": "",
    "hw": "nominal",
    "flash": 1,
    "T": 1,
    "P": 1,
    "S": 1,
    "sp": "none",
    "v": 1,
    "zero": 1,
    "fsdp": "reshard",
    "shard": 0,
    "b": 1,
    "B": 64,
    "rc": "none",
    "pr": "bf16",
    "top": 10,
}
PRECISIONS = ("bf16", "fp16", "fp32")
INTS = (
    "layers hidden heads kv_heads ffn vocab seq G node flash T P S v zero shard b B m top"
).split()
FLOATS = ("mem", "eff")
# the step's parts: Plan field, label, the link group of Plan.tiers that carries it
STEP_PARTS = (
    ("compute_s", "compute", None),
    ("tp_comm_s", "tensor-parallel communication", "tp"),
    ("sp_comm_s", "sequence-parallel all-to-all", None),
    ("pp_comm_s", "pipeline sends", "pp"),
    ("bubble_s", "pipeline bubble", None),
    ("dp_comm_s", "data-parallel communication, exposed", "dp"),
)


def hardware_presets() -> dict[str, dict]:
    """The cluster presets as the page's menu shows them: label, node size, GiB, efficiency."""
    return {
        k: {"label": label, "node": hw.gpus_per_node, "mem": hw.memory_gib, "eff": hw.mfu}
        for k, (label, hw) in HARDWARE.items()
    }


def settings_of(raw: dict) -> dict:
    """``raw`` (strings from a URL are fine) with the defaults filled in and numbers as numbers;
    a hardware preset fills the node size, memory and efficiency it was not given."""
    s = {**DEFAULTS, **{k: v for k, v in raw.items() if v not in (None, "")}}
    if s["hw"] not in HARDWARE:
        raise ValueError(f"unknown hardware {s['hw']!r}: one of {', '.join(HARDWARE)}")
    hw = HARDWARE[s["hw"]][1]
    s.setdefault("node", hw.gpus_per_node)
    s.setdefault("mem", hw.memory_gib)
    s.setdefault("eff", hw.mfu)
    for k in INTS:
        if k in s:
            s[k] = int(float(s[k]))
    for k in FLOATS:
        s[k] = float(s[k])
    checks = (("sp", SP_MODES), ("fsdp", FSDP_FORMS), ("rc", RECOMPUTE_MODES), ("pr", PRECISIONS))
    for key, allowed in checks:
        if s[key] not in allowed:
            raise ValueError(f"{key} must be one of {allowed}, not {s[key]!r}")
    if s["style"] not in ("llama", "gpt"):
        raise ValueError(f"style must be llama or gpt, not {s['style']!r}")
    return s


def model_of(s: dict) -> ModelShape:
    """The decoder of the settings: Llama-style (SwiGLU of width ffn) or GPT-style."""
    name = s["name"] or "custom"
    if s["style"] == "gpt":
        return ModelShape.gpt(
            s["layers"], s["hidden"], s["heads"], s["vocab"], s["seq"], s["ffn"], name=name
        )
    kv = s.get("kv_heads") or s["heads"]
    return ModelShape.llama(
        s["layers"], s["hidden"], s["heads"], kv, s["vocab"], s["ffn"], seq_len=s["seq"], name=name
    )


def hardware_of(s: dict) -> Hardware:
    hw = HARDWARE[s["hw"]][1]
    return replace(
        hw,
        gpus_per_node=s["node"],
        memory_gib=s["mem"],
        mfu=s["eff"],
        flash=bool(s["flash"]),
        precision=s["pr"],
    )


def layout_of(s: dict) -> tuple[Layout, int]:
    """(the layout, the global batch in sequences): D = G / (T·P·S), S counted only for an own
    sequence axis; ``m`` (accumulation steps) sets B = D·b·m when given."""
    mode = None if s["sp"] == "none" else s["sp"]
    own = s["S"] if mode == "all_to_all" else 1
    if min(s["G"], s["T"], s["P"], own, s["v"], s["b"]) < 1 or s["G"] % (s["T"] * s["P"] * own):
        raise ValueError(f"T×P×S = {s['T'] * s['P'] * own} does not divide G = {s['G']}")
    dp = s["G"] // (s["T"] * s["P"] * own)
    batch = dp * s["b"] * s["m"] if s.get("m") else s["B"]
    if batch % (dp * s["b"]) or batch < dp * s["b"]:
        raise ValueError(f"global batch {batch} is not a whole number of D×b = {dp * s['b']}")
    zero3 = s["zero"] == 3
    layout = Layout(
        dp,
        s["T"],
        s["P"],
        own,
        mode,
        s["b"],
        s["zero"],
        reshard_after_forward=not (zero3 and s["fsdp"] == "keep"),
        shard_degree=s["shard"] if zero3 and s["fsdp"] == "hsdp" and s["shard"] else None,
        chunks=s["v"],
        plugin="gemini" if zero3 else "hybrid_parallel",
    )
    return layout, batch


def _gib(x: float) -> str:
    return f"{x / GIB:.2f}"


def _sec(x: float) -> str:
    return f"{x:.4g}"


def _link(tiers: dict, group: str | None, layout: Layout) -> str:
    """The link a part's group uses (Plan.tiers), where that group has more than one rank."""
    size = {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp}.get(group, 1)
    if size < 2:
        return ""
    return tiers[group] + (f"; across replicas {tiers['rep']}" if "rep" in tiers else "")


def _absent(why: list, too_big: bool, recompute: str) -> str:
    """Why a layout is not in the planner's ranking."""
    if why:
        return "it breaks a rule above"
    if too_big:
        return "it does not fit in the GPU's memory"
    if recompute == "selective":
        return "the planner tries no recomputation or full recomputation, not selective"
    limits = {k: v.default for k, v in signature(enumerate_layouts).parameters.items()}
    return (
        f"it is outside the planner's search: T ≤ {limits['max_tp']}, P ≤ {limits['max_pp']}, "
        f"S ≤ {limits['max_sp']}, micro-batch in {limits['microbatches']}, "
        f"chunks in {limits['chunks']}"
    )


@lru_cache(maxsize=16)
def ranking(model: ModelShape, gpus: int, batch: int, hw: Hardware) -> tuple:
    """:func:`helpers.cost.planner.plan` for the model, GPUs and global batch (cached)."""
    return plan(model, gpus, batch, hw)


def calculate(raw: dict) -> dict:
    """Memory, step time and the planner's ranking of one configuration (see the module
    docstring); ``{"error": text}`` when the settings cannot be laid out."""
    try:
        return _calculate(settings_of(raw))
    except (KeyError, ValueError, ZeroDivisionError) as err:  # settings the models refuse
        return {"error": f"{type(err).__name__}: {err}"}


def _calculate(s: dict) -> dict:
    model, hw = model_of(s), hardware_of(s)
    layout, batch = layout_of(s)
    m = batch // (layout.dp * layout.microbatch)
    why = violations(layout, model, batch)
    if layout.zero_stage == 3:  # ZeRO-3 is GeminiPlugin's, as the planner takes it
        why += [rule.name for rule in GEMINI_RULES if rule.broken(layout_case(layout))]
    rc = s["rc"]
    mem = peak(
        model, layout, batch, rc, hw.flash, hw.overhead_gib, check=False, precision=hw.precision
    )
    p = plan_layout(model, layout, batch, hw, s["rc"], check=False)
    tokens = batch * model.seq_len
    parts = [(k, v) for k, v in mem["prediction"]["breakdown"].items()]
    parts.append(("outside the allocator", mem["outside"]))
    fits, count = ranking(model, s["G"], batch, hw)
    mine = next((i for i, q in enumerate(fits) if (q.layout, q.recompute) == (layout, s["rc"])), -1)
    capacity = hw.memory_gib * GIB
    rows = [q.row(tokens) for q in fits[: s["top"]]]
    return {
        "settings": s,
        "model": {
            "name": model.name,
            "params": model.params,
            "params_text": f"{model.params / 1e9:.2f} B",
        },
        "layout": {
            "text": str(layout),
            "sharding": layout.sharding,
            "D": layout.dp,
            "B": batch,
            "m": m,
            "tokens": tokens,
            "violations": why,
        },
        "memory": {
            "parts": [{"name": k, "bytes": v, "text": _gib(v)} for k, v in parts],
            "total": mem["total"],
            "total_text": _gib(mem["total"]),
            "capacity": capacity,
            "capacity_text": _gib(capacity),
            "fits": mem["total"] <= capacity,
            "stage": mem["stage"],
            "phase": mem["prediction"]["peak_phase"].replace("_", " "),
        },
        "step": {
            "parts": [
                {
                    "name": label,
                    "s": getattr(p, field),
                    "text": _sec(getattr(p, field)),
                    "share_text": f"{100 * getattr(p, field) / p.step_s:.1f}",
                    "link": _link(p.tiers, tier, layout),
                }
                for field, label, tier in STEP_PARTS
            ],
            "step_s": p.step_s,
            "step_text": _sec(p.step_s),
            "tokens_per_s_text": f"{tokens / p.step_s:,.0f}",
            "tokens_per_gpu_text": f"{tokens / p.step_s / s['G']:,.0f}",
            "mfu_text": f"{100 * step_mfu(p, model, batch, hw, model.seq_len, s['G']):.1f}",
        },
        "planner": {
            "count": count,
            "fit": len(fits),
            "rank": mine + 1,
            "absent": "" if mine >= 0 else _absent(why, mem["total"] > capacity, s["rc"]),
            "rows": rows,
            "cells": [[str(v) for v in row.values()] for row in rows],  # as Python prints them
        },
    }
