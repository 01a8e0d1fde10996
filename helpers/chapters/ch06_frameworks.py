"""Chapter 6 (Colossal-AI, DeepSpeed and Megatron-LM side by side): the notebook's glue for
sections 3 and 4.

Section 3 trains the same model on two processes once with PyTorch FSDP2 and once with
Colossal-AI (:func:`cpu_run`, the demo ``helpers.demos.ch08_train``); section 4 shows the recorded
Gemini re-run of ``helpers.record.ch08`` in the columns of :data:`GEMINI_COLUMNS`.
"""

from __future__ import annotations

from helpers.run.launch import launch

DEMO, RANKS = "ch08_train", 2
LAUNCHES = {DEMO: RANKS}  # what cpu_run launches: the ``also`` of helpers.notebook.live.show

# the columns of helpers.chapters.ch08_troubleshooting.gemini_rows, in the order the page shows
GEMINI_COLUMNS = [
    "run",
    "enable_async_reduce",
    "tokens/s",
    "MFU",
    "mean loss, steps 1-3",
    "reference, steps 1-3",
    "first non-finite step",
    "valid",
]


def cpu_args(framework: str, steps: int = 2, warmup: int = 1, ref_steps: int = 3) -> list[str]:
    """Section 3's arguments of ``ch08_train`` for ``framework`` (``fsdp2`` or ``colossal``): the
    DDP plugin, ``warmup`` + ``steps`` training steps and a single-process reference of
    ``ref_steps`` steps to compare the losses with; the run is named after the framework."""
    return [
        *("--framework", framework, "--plugin", "ddp"),
        *("--steps", str(steps), "--warmup", str(warmup), "--ref_steps", str(ref_steps)),
        *("--name", framework),
    ]


def cpu_run(framework: str, timeout_s: float = 300) -> tuple[dict, dict]:
    """Section 3: ``ch08_train`` on two processes with :func:`cpu_args`, quietly (on the CPU with
    gloo unless the machine has two GPUs: the launcher's rule); the first result of rank 0 and of
    rank 1 (each with the ``losses`` per step, rank 0's with the ``reference``)."""
    run = launch(DEMO, RANKS, cpu_args(framework), timeout_s=timeout_s, show="none")
    return run.first(0), run.first(1)
