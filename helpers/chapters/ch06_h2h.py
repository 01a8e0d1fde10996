"""Chapter 6, "Four frameworks, one GPU": the head-to-head of ``python -m helpers.record ch06``.

:func:`h2h_rows` is the verdict per framework (medians over its rounds, spread, ratio to FSDP2,
peak memory beside Chapter 7's model), :func:`kernel_rows` where each framework's step goes, per
sequence, by kind of kernel (rank 0's profiled step), and :func:`numbers` the values the page
glues. While nothing is recorded, :func:`h2h_rows` shows the plan
(:data:`helpers.record.ch06.ROWS`).
"""

from __future__ import annotations

import statistics

from helpers.chapters.ch08_flagship import KERNEL_HEADERS
from helpers.chapters.ch08_levers import model_phases
from helpers.record import ch06 as h2h
from helpers.record.flagship_runs import ROUND
from helpers.run.result_types.records import FlagshipRecord, FlagshipRun, RunSummary

PLAN_COLUMNS = ["framework and levers", "demo", "micro-batch (fallback)", "rounds"]
COLUMNS = [
    "framework and levers",
    "mbs",
    "rounds",
    "median tokens/s/GPU",
    "MFU",
    "of the reference rate",
    "peak GiB",
    "model GiB",
    "spread",
    "/ FSDP2",
    "max |Δ loss|",
]
SHORT = {
    "colossal": "Colossal-AI",
    "fsdp2": "FSDP2",
    "deepspeed": "DeepSpeed",
    "megatron": "Megatron",
}
# Chapter 7's model describes the book's Hugging Face Llama; Megatron-Core builds its own layers
MODELLED = ("colossal", "fsdp2", "deepspeed")


def _micro(args: list[str]) -> str:
    return args[len(args) - 1 - args[::-1].index("--micro_batch") + 1]


def groups(record: FlagshipRecord) -> list[dict]:
    """Per row of the head-to-head that has valid rounds: its verdict
    (:func:`helpers.record.flagship_summary.compare`) with its valid rounds' summaries."""
    out = []
    for g in record["compare"]:
        runs = [r for r in record["runs"] if r["name"].split(ROUND)[0] == g["name"]]
        ok = [r for r in runs if r["summary"].get("ok")]
        if g["median"] and ok:
            out.append({**g, "runs": ok, "framework": ok[0]["summary"]["framework"]})
    return out


def model_gib(run: FlagshipRun) -> float | None:
    """Chapter 7's predicted peak (the largest phase) for a run's flags, or None for a
    framework the model does not describe."""
    framework = run["summary"]["framework"]
    if framework not in MODELLED:
        return None
    # DeepSpeed's ZeRO-2 keeps what LowLevelZero's ZeRO-2 keeps: bf16 weights, fp32 master copy
    # and Adam moments, reduced gradients
    extra = ["--plugin", "zero"] if framework == "deepspeed" else []
    return max(model_phases(run["args"] + extra).values())


def h2h_rows(record: FlagshipRecord | None) -> tuple[list[dict], list[str]]:
    """(rows, columns): the plan while ``record`` is None, else one row per framework."""
    if record is None:
        plan = [
            {
                "framework and levers": name,
                "demo": demo,
                "micro-batch (fallback)": f"{_micro(args)} ({fallback})",
                "rounds": h2h.ROUNDS,
            }
            for name, demo, args, fallback in h2h.ROWS
        ]
        return plan, PLAN_COLUMNS
    rows = []
    for g in groups(record):
        s: list[RunSummary] = [r["summary"] for r in g["runs"]]
        model = model_gib(g["runs"][0])
        ceiling = statistics.median(x["ceiling_fraction"] for x in s)
        rows.append(
            {
                "framework and levers": g["name"],
                "mbs": s[0]["micro_batch"],
                "rounds": g["rounds"],
                "median tokens/s/GPU": f"{g['median']:,.0f}",
                "MFU": f"{g['mfu_median']:.1%}",
                "of the reference rate": f"{ceiling:.1%}",
                "peak GiB": f"{max(x['peak_gib'] for x in s):.1f}",
                "model GiB": "—" if model is None else f"{model:.1f}",
                "spread": f"{g['spread']:.1%}",
                "/ FSDP2": f"{g['vs_fsdp2']:.3f}",
                "max |Δ loss|": f"{max(x['max_ref_gap'] for x in s):.4f}",
            }
        )
    return rows, COLUMNS


def kernel_rows(record: FlagshipRecord) -> list[dict]:
    """Each framework's first valid round: ms of GPU time per sequence of its micro-batch, by
    kind of kernel, and the step's time per sequence."""
    out = []
    for g in groups(record):
        s: RunSummary = g["runs"][0]["summary"]
        per = 1000 / s["micro_batch"]
        ms = s["kernels"]["ms"]
        row = {"framework": SHORT[g["framework"]], "mbs": s["micro_batch"]}
        row["step"] = round(per * s["seconds_per_step"], 2)
        row |= {h: round(ms[c] / s["micro_batch"], 2) for c, h in KERNEL_HEADERS.items() if c in ms}
        out.append(row)
    return out


def kernel_columns(rows: list[dict]) -> list[str]:
    """framework, micro-batch, step, then the kernel classes any row has."""
    return ["framework", "mbs", "step"] + [
        h for h in KERNEL_HEADERS.values() if any(h in r for r in rows)
    ]


def numbers(record: FlagshipRecord) -> dict:
    """The values Chapter 6's page glues (``ch06-h2h-<framework>-<quantity>``), rounded so that
    they print the same everywhere."""
    out = {}
    kern = {r["framework"]: r for r in kernel_rows(record)}
    for g in groups(record):
        key, s = f"ch06-h2h-{g['framework']}", [r["summary"] for r in g["runs"]]
        k = kern[SHORT[g["framework"]]]
        out |= {
            f"{key}-mfu": round(100 * g["mfu_median"], 1),
            f"{key}-tokens": int(g["median"]),
            f"{key}-spread": round(100 * g["spread"], 2),
            f"{key}-ceiling": round(100 * statistics.median(x["ceiling_fraction"] for x in s), 1),
            f"{key}-peak": round(max(x["peak_gib"] for x in s), 1),
            f"{key}-mbs": s[0]["micro_batch"],
            f"{key}-step-per-seq": k["step"],
            f"{key}-cast-per-seq": k.get("copy/cast", 0.0),
            f"{key}-opt-per-seq": k.get("optimizer", 0.0),
            f"{key}-matmul-per-seq": k.get("matmul", 0.0),
        }
        if g["framework"] != "fsdp2":  # FSDP2 is the yardstick: its own ratio is 1
            out[f"{key}-vs-fsdp2"] = round(g["vs_fsdp2"], 3)
    out["ch06-h2h-max-spread"] = max(round(100 * g["spread"], 2) for g in groups(record))
    oom = [r for r in record["runs"] if "out of memory" in r["name"]]
    if oom:
        out["ch06-h2h-megatron-oom-mbs"] = int(_micro(oom[0]["args"]))
    return out
