"""Chapter 7's memory table: the layouts of one Llama, and which of them run at a world size.

Every layout of :data:`LAYOUTS` trains the same Llama (24 layers, h = 1024) under one Colossal-AI
plugin, one precision and one memory technique (:class:`helpers.parallel.train_layout.TrainLayout`);
the recorder :mod:`helpers.record.ch07` runs each as one torchrun. :func:`layouts_for` says which
run at a world size (at world 1 not those that need two GPUs, tensor and pipeline parallelism, nor
ZeRO-1 bf16, which there is ZeRO-2 bf16 again: one rank holds every shard), in the order recorded
(Chapter 7, "The model against the GPU", "One GPU beside two").

:data:`ACCUMULATION` are six more layouts, run only when ``--only`` names them or their group
(:data:`GROUPS`) and only at world size 1, into the one-GPU record: plain gradient accumulation
(pp = 1, m = 1, 2, 4 micro-batches of 2 sequences per step) under HybridParallelPlugin bf16 at
ZeRO 0 and LowLevelZero ZeRO-1 bf16, which measure the gradients a rank holds while the next
micro-batch builds its activations (:func:`helpers.cost.memory_llama.predict`'s ``held``). They
are not in :data:`LAYOUTS`, so the memory table and its one-GPU column stay as they are.
"""

from __future__ import annotations

from dataclasses import replace

from helpers.parallel.train_layout import TrainLayout

NPROC = 2
MIB, GIB = 2**20, 2**30
T = TrainLayout
LAYOUTS = [
    T("DDP fp32", "ddp", "fp32"),
    T("DDP fp32 + recompute", "ddp", "fp32", recompute=True),
    T("DDP bf16 (Hybrid tp=1)", "hybrid", "bf16"),
    T("ZeRO-1 fp32", "zero", "fp32", zero_stage=1),
    T("ZeRO-1 bf16", "zero", "bf16", zero_stage=1),
    T("ZeRO-1 bf16 + recompute", "zero", "bf16", zero_stage=1, recompute=True),
    T("ZeRO-2 bf16", "zero", "bf16", zero_stage=2),
    T("ZeRO-2 bf16, micro-batch 8", "zero", "bf16", zero_stage=2, micro_batch=8),
    T("ZeRO-2 bf16, eager attention", "zero", "bf16", zero_stage=2, attn="eager"),
    T("ZeRO-2 bf16 + CPU offload", "zero", "bf16", zero_stage=2, offload=True),
    T("Gemini bf16 (static)", "gemini", "bf16"),
    T("Gemini bf16 + offload", "gemini", "bf16", offload=True),
    T("Gemini bf16 (auto)", "gemini", "bf16", placement="auto"),
    T("TP=2 bf16", "hybrid", "bf16", tp=2),
    T("TP=2 bf16 + recompute", "hybrid", "bf16", tp=2, recompute=True),
    T("PP=2 bf16 (1F1B, 4 micro-batches)", "hybrid", "bf16", pp=2, microbatches=4),
]
QUICK = ["DDP fp32", "ZeRO-2 bf16", "PP=2 bf16 (1F1B, 4 micro-batches)"]
# one layout per technique of the seed's list, against plain fp32 data parallelism
TECHNIQUES = [
    "DDP fp32",
    "DDP bf16 (Hybrid tp=1)",
    "ZeRO-1 bf16",
    "ZeRO-2 bf16",
    "Gemini bf16 (static)",
    "ZeRO-1 bf16 + recompute",
    "ZeRO-2 bf16 + CPU offload",
    "Gemini bf16 + offload",
]
# World size 1, in the order recorded (a budget cut leaves out the tail): the techniques first
WORLD1 = [
    "DDP fp32",
    "DDP bf16 (Hybrid tp=1)",
    "ZeRO-2 bf16",
    "ZeRO-2 bf16 + CPU offload",
    "Gemini bf16 (static)",
    "Gemini bf16 + offload",
    "ZeRO-1 bf16 + recompute",
    "DDP fp32 + recompute",
    "ZeRO-2 bf16, micro-batch 8",
    "ZeRO-2 bf16, eager attention",
    "Gemini bf16 (auto)",
    "ZeRO-1 fp32",
]
SAME_AT_WORLD1 = {"ZeRO-1 bf16": "ZeRO-2 bf16"}  # layouts that one rank makes identical to another
# Gradient accumulation on one GPU: with micro-batch 2 the model puts every step's peak at the start
# of a backward (1.6 GiB above the optimizer step under Hybrid, 0.67 GiB under ZeRO-1), where the
# bf16 gradients held from the earlier micro-batches (0.69 GiB) are 7-8 % of it
ACCUMULATION_MICRO_BATCH = 2
ACCUMULATION_MS = (1, 2, 4)
ACCUMULATION_PLUGINS = {  # name prefix: (plugin, ZeRO stage)
    "Hybrid bf16": ("hybrid", 0),
    "ZeRO-1 bf16": ("zero", 1),
}
ACCUMULATION = [
    T(
        f"{prefix}, accumulation m={m}",
        plugin,
        "bf16",
        zero_stage=stage,
        microbatches=m,
        micro_batch=ACCUMULATION_MICRO_BATCH,
        world=1,
    )
    for prefix, (plugin, stage) in ACCUMULATION_PLUGINS.items()
    for m in ACCUMULATION_MS
]
GROUPS = {"accumulation": [x.name for x in ACCUMULATION]}  # ``--only`` names for several layouts
ALL = LAYOUTS + ACCUMULATION


def layout_named(name: str, world: int = NPROC) -> TrainLayout:
    """The layout called ``name`` (of :data:`ALL`), at world size ``world`` (ValueError if it
    cannot run there)."""
    layout = next(x for x in ALL if x.name == name)
    return layout if layout.world == world else replace(layout, world=world)


def not_at_world(name: str, world: int) -> str | None:
    """Why layout ``name`` is not run at world size ``world``, or None when it is."""
    layout = next(x for x in ALL if x.name == name)
    if layout in ACCUMULATION and world != 1:
        return "an accumulation layout of the one-GPU record: run it with --gpus 1"
    if world % (layout.tp * layout.pp):
        return f"needs {layout.tp * layout.pp} GPUs (tp·pp = {layout.tp * layout.pp})"
    if world == 1 and name in SAME_AT_WORLD1:
        return f"at world 1 the same layout as {SAME_AT_WORLD1[name]}: one rank holds every shard"
    return None


def layouts_for(world: int) -> tuple[list[str], dict[str, str]]:
    """(names to run in order, {name: why not run}) of the memory table at world size ``world``."""
    order = (
        WORLD1 + [x.name for x in LAYOUTS if x.name not in WORLD1]
        if world == 1
        else [x.name for x in LAYOUTS]
    )
    skipped = {n: why for n in order if (why := not_at_world(n, world))}
    return [n for n in order if n not in skipped], skipped


def sharding_note(layout: TrainLayout) -> str:
    """What a layout shards at its world size, when that is nothing although its plugin would."""
    if layout.dp == 1 and (layout.plugin in ("zero", "gemini")):
        return "nothing sharded at world 1 (one rank holds every shard)"
    return ""


def plan(
    gpus: int = NPROC, quick: bool = False, only: list[str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """(layouts to run, {layout: why not run}) of a recording: :func:`layouts_for`, narrowed by
    ``quick`` or ``only`` (layout names or :data:`GROUPS`; a name ``only`` asks for that cannot run
    at ``gpus`` is a ValueError). Only ``only`` runs :data:`ACCUMULATION`, after the others."""
    names, skipped = layouts_for(gpus)
    known = {x.name for x in ALL}
    wanted = [x for n in only or [] for x in GROUPS.get(n, [n])]
    for n in wanted:
        if n not in known:
            raise ValueError(f"unknown layout {n!r}: one of {sorted(known | set(GROUPS))}")
        why = not_at_world(n, gpus)
        if why:
            raise ValueError(f"{n!r} does not run at world size {gpus}: {why}")
    if only:
        return [n for n in names + [x.name for x in ACCUMULATION] if n in wanted], {}
    if quick:
        return [n for n in names if n in QUICK], {}
    return names, skipped
