"""Chapter 6 (Colossal-AI, DeepSpeed, Megatron-Core and PyTorch side by side): the notebook's glue.

:func:`feature_rows` and :func:`maintenance_rows` are the feature table and its dated maintenance
row (``helpers/data/framework_maintenance.yaml``); :func:`cpu_run` trains the same model on two
processes with PyTorch FSDP2 or Colossal-AI (the demo ``ch08_train``); :func:`equal_rows` is
LowLevelZero ZeRO-2 against FSDP2 with the same knobs in both (the head-to-heads of Chapter 8,
medians of their rounds and spreads), :func:`ratio_rows` the same ratio in every record that ran
both, knobs equal or not. The four-framework head-to-head is :mod:`helpers.chapters.ch06_h2h`.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import yaml

from helpers.config.frameworks import FEATURE_COLUMNS, FEATURES
from helpers.record.flagship_summary import compare
from helpers.record.results import recorded
from helpers.run.result_types.ch08 import FrameworkTrainResult
from helpers.run.result_types.records import FlagshipRecord, Verdict
from helpers.run.launch import REPO_ROOT, launch

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
# what the notebook launches: the ``also`` of helpers.notebook.live.show
LAUNCHES = {DEMO: RANKS, "ch06_deepspeed": 2}
MAINTENANCE = REPO_ROOT / "helpers" / "data" / "framework_maintenance.yaml"

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


def _rank0(record: FlagshipRecord, name: str) -> list[FrameworkTrainResult]:
    """Rank 0's result of ``name``, or of each of its rounds, where the run finished."""
    runs = [r for r in record["runs"] if r.get("name", "").split(" · round ")[0] == name]
    return [r["results"][0] for r in runs if r.get("ok", True) and r.get("results")]


def _median(results: list[FrameworkTrainResult], key) -> float:
    return statistics.median(key(r) for r in results)


def ratio_rows(records: dict[str, dict] | None = None) -> list[dict]:
    """One row per pair of :data:`PAIRS` whose record holds both runs: sequences per GPU, the
    optimizers, tokens/s per GPU of each, their ratio, and the communication the profiler found
    exposed (not overlapped by compute) per step. ``records``: name -> record (default: the
    book's, :func:`helpers.record.results.recorded`)."""
    if records is None:
        records = {n: recorded(n) for n in {p[0] for p in PAIRS}}
    rows = []
    for name, fsdp_run, zero_run, setup in PAIRS:
        record: FlagshipRecord | None = records.get(name)
        f = _rank0(record, fsdp_run) if record else []
        z = _rank0(record, zero_run) if record else []
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


def feature_rows() -> list[dict]:
    """The feature table: one row per idea, its name in each framework, where the book runs it."""
    return [dict(zip(FEATURE_COLUMNS, row)) for row in FEATURES]


def maintenance(path: Path = MAINTENANCE) -> dict:
    """The checked maintenance facts (the data file, as read)."""
    return yaml.safe_load(path.read_text())


MAINTENANCE_COLUMNS = ["framework", "what", "value", "source"]


def maintenance_rows(data: dict | None = None) -> list[dict]:
    """One row per checked fact (framework, what, value, source), then the day of the check."""
    data = maintenance() if data is None else data
    return [
        {
            "framework": name,
            "what": what.replace("_", " "),
            "value": f["value"],
            "source": f["source"],
        }
        for name, facts in data["frameworks"].items()
        for what, f in facts.items()
    ] + [{"framework": "all", "what": "checked on", "value": data["checked"], "source": "—"}]


# the equal-knob head-to-heads: (record, GPUs, LowLevelZero's run, FSDP2's run, what they share)
EQUAL = [
    (
        "flagship_h2h",
        2,
        "+ gradient norm kept on the GPU (no host sync in step)",
        "FSDP2 + torch.compile, micro-batch 16",
        "compiled per layer, fused AdamW, 16 sequences per GPU (gradients reduced in fp32 by "
        "FSDP2, in bf16 by ZeRO-2)",
    ),
    (
        "flagship_levers_h2h",
        1,
        "Colossal-AI LowLevelZero ZeRO-2, best levers",
        "FSDP2, best levers",
        "compiled per layer, fused AdamW, cuDNN attention, Liger CE, 48 sequences",
    ),
]
EQUAL_COLUMNS = [
    "record",
    "GPUs",
    "same in both",
    "rounds",
    "ZeRO-2 median tokens/s/GPU (spread)",
    "FSDP2 median tokens/s/GPU (spread)",
    "ZeRO-2 / FSDP2",
    "lead",
]


def equal_rows(records: dict | None = None) -> list[dict]:
    """LowLevelZero ZeRO-2 against FSDP2 with the same knobs, per head-to-head record: medians of
    the rounds, their spreads ((max - min) / median), the ratio, and whether a lead exceeds the
    larger spread (a lead within it is not claimed). ``records``: name -> record."""
    if records is None:
        records = {name: recorded(name, gpus=gpus) for name, gpus, *_ in EQUAL}
    rows = []
    for name, gpus, zero, fsdp, same in EQUAL:
        record: FlagshipRecord | None = records.get(name)
        if not record:
            continue
        groups = {g["name"]: g for g in compare([r["summary"] for r in record["runs"]])}
        z: Verdict | None = groups.get(zero)
        f: Verdict | None = groups.get(fsdp)
        if not (z and f and z["valid"] and f["valid"]):
            continue
        ratio, spread = z["median"] / f["median"], max(z["spread"], f["spread"])
        lead = "beyond the spread" if abs(ratio - 1) > spread else "within the spread: none"
        rows.append(
            {
                "record": name,
                "GPUs": gpus,
                "same in both": same,
                "rounds": min(z["rounds"], f["rounds"]),
                "ZeRO-2 median tokens/s/GPU (spread)": f"{z['median']:,.0f} ({z['spread']:.1%})",
                "FSDP2 median tokens/s/GPU (spread)": f"{f['median']:,.0f} ({f['spread']:.1%})",
                "ZeRO-2 / FSDP2": f"{ratio:.3f}",
                "lead": lead,
                "mfu": (z["mfu_median"], f["mfu_median"]),
                "spread": spread,
            }
        )
    return rows


def compare_numbers(compare: list[dict]) -> dict:
    """The values Chapter 6's page glues from the recorded two-GPU comparison (``ch08_compare``:
    FSDP2, LowLevelZero ZeRO-2, tp = 2 and Gemini on the 0.94 B Llama), keyed ``ch06-cmp-*``."""
    by = {
        w: next(p for p in compare if w in p["name"])
        for w in ("FSDP2", "LowLevelZero", "tp=2", "Gemini")
    }
    fsdp, zero, tp, gem = by["FSDP2"], by["LowLevelZero"], by["tp=2"], by["Gemini"]
    return {
        "ch06-cmp-zero-tps": zero["tokens_per_s"],
        "ch06-cmp-fsdp-tps": fsdp["tokens_per_s"],
        "ch06-cmp-zero-mfu-pct": 100 * zero["mfu"],
        "ch06-cmp-fsdp-mfu-pct": 100 * fsdp["mfu"],
        "ch06-cmp-ratio": zero["tokens_per_s"] / fsdp["tokens_per_s"],
        "ch06-cmp-zero-peak": zero["peak_gib"],
        "ch06-cmp-fsdp-peak": fsdp["peak_gib"],
        "ch06-cmp-tp-tps": tp["tokens_per_s"],
        "ch06-cmp-tp-mfu-pct": 100 * tp["mfu"],
        "ch06-cmp-tp-peak": tp["peak_gib"],
        "ch06-cmp-tp-vs-zero": tp["tokens_per_s"] / zero["tokens_per_s"],
        "ch06-cmp-gemini-tps": gem["tokens_per_s"],
        "ch06-cmp-gemini-mfu-pct": 100 * gem["mfu"],
        "ch06-cmp-per-gpu": fsdp["global_batch"] // 2,
        "gemini-valid": gem["valid"],
    }
