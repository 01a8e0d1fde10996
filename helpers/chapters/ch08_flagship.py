"""Chapter 8's flagship records as the book shows them: the run list's table and kernel tables.

Reads what :mod:`helpers.record.flagship` recorded (``flagship.json``: the run list, one knob per
row) and recomputes every number from the ranks' results with
:func:`helpers.record.flagship_summary.summarize`; nothing here is typed in. The tuning steps
and the head-to-head are in :mod:`helpers.chapters.ch08_tuning`, the one-GPU record beside the
2-GPU runs in :mod:`helpers.chapters.ch08_one_gpu`; the MFU figure is
:func:`helpers.figures.ch08_flagship.mfu_figure`.
"""

from __future__ import annotations

from helpers.record import results
from helpers.record.flagship_runs import NPROC
from helpers.record.flagship_summary import summarize
from helpers.run.result_types.records import FlagshipRecord


COLUMNS = [
    "name",
    "setup",
    "tokens/s/GPU",
    "MFU %",
    "MFU % (all params)",
    "peak GiB",
    "loss after n steps",
    "max |Δ ref|",
    "loss ok",
]


def recorded(name: str = "flagship", gpus: int = NPROC) -> FlagshipRecord | None:
    """:func:`helpers.record.results.recorded`: the run list (``flagship``) or head-to-head
    (``flagship_h2h``) made on ``gpus`` GPUs (default 2, the book's; 1: the one-GPU record)."""
    return results.recorded(name, gpus=gpus)


def setup(row: dict) -> str:
    """What a run ran, in a few words, e.g.
    'LowLevelZero ZeRO-2 · compiled · adamw_fused · buckets 128 M · mbs 8'."""
    plugin = {
        "fully_shard": "FSDP2",
        "zero": f"LowLevelZero ZeRO-{row.get('zero_stage') or 2}",
        "hybrid": "HybridParallel",
        "gemini": "Gemini",
    }
    parts = [
        plugin.get(row["plugin"], row["plugin"]),
        "compiled" if row["compiled"] else "eager",
        row["optimizer"],
    ]
    if "reduce_bucket_size_in_m" in row["plugin_kw"]:
        parts.append(f"buckets {row['plugin_kw']['reduce_bucket_size_in_m']} M")
    if row["plugin_kw"].get("overlap_allgather"):
        parts.append("overlapped all-gather")
    if row.get("norm_on_device"):
        parts.append("norm on GPU")
    return " · ".join(parts + [f"mbs {row['micro_batch']}"])


def table_rows(record: FlagshipRecord) -> list[dict]:
    """The book's table of a record: one row per run, recomputed from the ranks' results."""
    rows = []
    for run in record["runs"]:
        s = summarize(run["name"], run)
        if not s["ok"]:
            rows.append(
                {
                    "name": s["name"],
                    "tokens/s/GPU": "failed",
                    "loss ok": s["error"].splitlines()[-1][:80],
                }
            )
            continue
        rows.append(
            {
                "name": s["name"],
                "setup": setup(s),
                "tokens/s/GPU": f"{s['tokens_per_s_per_gpu']:,}",
                "MFU %": f"{100 * s['mfu']:.1f}",
                "MFU % (all params)": f"{100 * s['mfu_all_params']:.1f}",
                "peak GiB": s["peak_gib"],
                "loss after n steps": s["loss_last"],
                "max |Δ ref|": s["max_ref_gap"],
                "loss ok": "yes" if s["loss_ok"] else "NO",
            }
        )
    return rows


KERNEL_HEADERS = {  # kernel class (helpers.train.profiling.kernel_classes) -> its column
    "matmul": "matmul",
    "attention": "attention",
    "triton (compiled)": "Triton",
    "copy/cast": "copy/cast",
    "elementwise/other": "elementwise",
    "cross-entropy": "CE",
    "optimizer": "optimizer",
    "communication": "comm.",
}


def kernel_row(name: str, step_ms: float, ms: dict[str, float], idle_ms: float) -> dict:
    """One run's profiled step for a kernel table: the timed step, the time its GPU computed
    nothing (``idle``) and each kernel class's ms per step, under the short headers of
    :data:`KERNEL_HEADERS` so that the table fits the page."""
    row = {"run": name, "step": round(step_ms, 1), "idle": round(idle_ms, 1)}
    return row | {h: round(ms[c], 1) for c, h in KERNEL_HEADERS.items() if c in ms}


def kernel_rows(record: FlagshipRecord) -> list[dict]:
    """Rank 0's profiled device time per step by kind of kernel
    (helpers.train.profiling.kernel_classes), per run (:func:`kernel_row`).

    ``idle`` is the timed step less every class but communication: the time rank 0's GPU
    computed nothing (exposed communication, or waiting for the host)."""
    rows = []
    for run in record["runs"]:
        s = summarize(run["name"], run)
        if s["ok"] and s.get("kernels"):
            ms = s["kernels"]["ms"]
            step = 1000 * s["seconds_per_step"]
            compute = sum(v for c, v in ms.items() if c != "communication")
            rows.append(kernel_row(s["name"], step, ms, step - compute))
    return rows


def columns(rows: list[dict]) -> list[str]:
    """The columns of kernel rows: run, step and idle, then the kernel classes any row has, in
    the order of :data:`KERNEL_HEADERS`."""
    return ["run", "step", "idle"] + [
        h for h in KERNEL_HEADERS.values() if any(h in r for r in rows)
    ]
