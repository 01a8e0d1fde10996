"""Chapter 6 (Colossal-AI, DeepSpeed and Megatron-LM side by side): the notebook's glue for
sections 3 and 4.

Section 3 trains the same model on two processes once with PyTorch FSDP2 and once with
Colossal-AI (:func:`cpu_run`, the demo ``helpers.demos.ch08_train``); section 4 shows the recorded
Gemini re-run of ``helpers.record.ch08`` in the columns of :data:`GEMINI_COLUMNS`, and
:func:`ratio_rows` what the LowLevelZero / FSDP2 throughput ratio was in each record that ran both
on the same model: Chapter 6's comparison and Chapter 8's flagship runs.
"""

from __future__ import annotations

import statistics

from helpers.run.launch import launch

# (record, FSDP2's run, LowLevelZero ZeRO-2's run, what else the pair shares); a head-to-head's
# runs are named "<run> · round k" and enter by their medians
PAIRS = [
    (
        "ch08_compare",
        "PyTorch FSDP2 (fully_shard per layer, AdamW)",
        "Colossal-AI LowLevelZero ZeRO-2",
        "eager",
    ),
    ("flagship", "FSDP2, eager", "LowLevelZero ZeRO-2, eager", "eager"),
    (
        "flagship",
        "FSDP2 + torch.compile + fused AdamW",
        "+ fused torch AdamW instead of HybridAdam",
        "compiled per layer, fused AdamW in both",
    ),
    (
        "flagship_h2h",
        "FSDP2 + torch.compile, micro-batch 16",
        "+ gradient norm kept on the GPU (no host sync in step)",
        "compiled per layer, fused AdamW in both; medians of the rounds",
    ),
]
# what helpers/parallel/fsdp2.py passed at every one of those recordings (the records do not carry
# it): MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=torch.float32); LowLevelZeroPlugin's
# communication_dtype=None reduces in the parameters' dtype (colossalai 0.5.0,
# booster/plugin/low_level_zero_plugin.py:398), bf16 here
REDUCE_DTYPES = {"fsdp2": "fp32", "zero": "bf16"}
RATIO_COLUMNS = [
    "record",
    "sequences per GPU",
    "setup",
    "optimizers (FSDP2 / ZeRO-2)",
    "FSDP2 tokens/s/GPU",
    "ZeRO-2 tokens/s/GPU",
    "ZeRO-2 / FSDP2",
    "exposed comm ms (FSDP2 / ZeRO-2)",
]

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
    DDP plugin, ``warmup`` + ``steps`` training steps, the last one under the profiler, and a
    single-process reference of ``ref_steps`` steps to compare the losses with; the run is named
    after the framework."""
    return [
        *("--framework", framework, "--plugin", "ddp"),
        *("--steps", str(steps), "--warmup", str(warmup), "--ref_steps", str(ref_steps)),
        *("--profile", "1", "--name", framework),
    ]


def cpu_run(framework: str, timeout_s: float = 300) -> tuple[dict, dict]:
    """Section 3: ``ch08_train`` on two processes with :func:`cpu_args`, quietly (on the CPU with
    gloo unless the machine has two GPUs: the launcher's rule); the first result of rank 0 and of
    rank 1 (each with the ``losses`` per step, rank 0's with the ``reference``)."""
    run = launch(DEMO, RANKS, cpu_args(framework), timeout_s=timeout_s, show="none")
    return run.first(0), run.first(1)


def _rank0(record: dict, name: str) -> list[dict]:
    """Rank 0's result of ``name``, or of each of its rounds, where the run finished."""
    runs = [r for r in record["runs"] if r.get("name", "").split(" · round ")[0] == name]
    return [r["results"][0] for r in runs if r.get("ok", True) and r.get("results")]


def _median(results: list[dict], key) -> float:
    return statistics.median(key(r) for r in results)


def ratio_rows(records: dict[str, dict] | None = None) -> list[dict]:
    """One row per pair of :data:`PAIRS` whose record holds both runs: sequences per GPU, the
    optimizers, tokens/s per GPU of each, their ratio, and the communication the profiler found
    exposed (not overlapped by compute) per step. ``records``: name -> record (default: the
    book's, :func:`helpers.record.results.recorded`)."""
    if records is None:
        from helpers.record.results import recorded

        records = {n: recorded(n) for n in {p[0] for p in PAIRS}}
    rows = []
    for name, fsdp_run, zero_run, setup in PAIRS:
        record = records.get(name)
        f, z = (_rank0(record, n) if record else [] for n in (fsdp_run, zero_run))
        if not f or not z:
            continue
        speed = [_median(x, lambda r: r["tokens_per_s"] / r["gpus"]) for x in (f, z)]
        comm = [
            _median(x, lambda r: (r.get("profile") or {}).get("exposed_comm_ms", 0)) for x in (f, z)
        ]
        rows.append(
            {
                "record": name,
                "sequences per GPU": f[0]["micro_batch"],
                "setup": setup,
                "optimizers (FSDP2 / ZeRO-2)": f"{f[0]['optimizer']} / {z[0]['optimizer']}",
                "FSDP2 tokens/s/GPU": f"{speed[0]:,.0f}",
                "ZeRO-2 tokens/s/GPU": f"{speed[1]:,.0f}",
                "ZeRO-2 / FSDP2": f"{speed[1] / speed[0]:.3f}",
                "exposed comm ms (FSDP2 / ZeRO-2)": f"{comm[0]:.1f} / {comm[1]:.1f}",
            }
        )
    return rows
