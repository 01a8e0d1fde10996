"""ipywidgets calculators for the notebooks.

Chapter 3: :func:`planner_calculator` puts :func:`helpers.cost.planner.plan` behind a few controls
(model, GPUs, GPUs per node, memory per GPU, global batch, assumed MFU); its table names how each
layout holds the model states (the ``sharding`` column of :meth:`helpers.cost.step_time.Plan.row`:
DDP, ZeRO-1, ZeRO-2, FSDP, FSDP kept after forward, HSDP) and which recomputation it uses. It is
built with ``widgets.interactive`` and shown with ``display``, not with ``@interact``, which
occasionally blocks notebook execution for the whole timeout. The same text the widget shows comes
from :func:`planner_summary`, which a notebook prints once as a static result, so the rendered book
shows the answer even where widgets are not live.
"""

from __future__ import annotations

from dataclasses import replace

from helpers.cost.planner import LLAMA2_70B, SEED_7B5, VALIDATION_0B5, plan
from helpers.cost.step_time import Hardware
from helpers.record.results import format_table

MODELS = {m.name: m for m in (SEED_7B5, LLAMA2_70B, VALIDATION_0B5)}
COLUMNS = [
    "layout",
    "sharding",
    "micro-batch",
    "m",
    "recompute",
    "memory GiB",
    "step s",
    "tokens/s",
]


def planner_summary(
    model: str = SEED_7B5.name,
    gpus: int = 32,
    gpus_per_node: int = 8,
    memory_gib: float = 80.0,
    global_batch: int = 64,
    mfu: float = 0.4,
    top: int = 8,
) -> str:
    """The planner's answer as text: how many layouts, how many fit, the fastest ``top``."""
    m = MODELS[model]
    hw = replace(Hardware(), gpus_per_node=gpus_per_node, memory_gib=memory_gib, mfu=mfu)
    fits, count = plan(m, gpus, global_batch, hw)
    head = (
        f"{m.name} ({m.params / 1e9:.2f} B params, seq {m.seq_len}) on {gpus} GPUs "
        f"({gpus_per_node} per node, {memory_gib:g} GiB each), global batch {global_batch}:\n"
        f"{count} layouts, {len(fits)} fit"
    )
    if not fits:
        return head + "\nnothing fits: add GPUs or memory, or lower the batch"
    rows = [p.row(global_batch * m.seq_len) for p in fits[:top]]
    return head + "\n" + format_table(rows, COLUMNS)


def planner_calculator():
    """An ``interactive`` widget over :func:`planner_summary`; display it with ``display(...)``."""
    import ipywidgets as w

    def show(**kw):
        print(planner_summary(**kw))

    return w.interactive(
        show,
        model=w.Dropdown(options=list(MODELS), value=SEED_7B5.name, description="model"),
        gpus=w.Dropdown(
            options=[2, 8, 16, 32, 64, 128, 256, 512, 1024], value=32, description="GPUs"
        ),
        gpus_per_node=w.Dropdown(options=[2, 4, 8], value=8, description="per node"),
        memory_gib=w.Dropdown(options=[24.0, 40.0, 80.0, 141.0], value=80.0, description="GiB/GPU"),
        global_batch=w.Dropdown(
            options=[16, 32, 64, 128, 256, 512, 1024], value=64, description="batch"
        ),
        mfu=w.FloatSlider(value=0.4, min=0.2, max=0.6, step=0.05, description="MFU"),
        top=w.fixed(8),
    )
