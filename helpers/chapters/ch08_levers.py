"""Chapter 8, "One H200, one lever per row": the lever, head-to-head and FP8 records as tables.

Used by ``notebooks/08_troubleshooting.ipynb`` and :mod:`helpers.chapters.ch08_lever_numbers`.
Reads ``results/1x…/flagship_levers.json``, ``flagship_levers_h2h.json`` and
``flagship_fp8.json`` (:mod:`helpers.record.flagship_levers`); every figure is recomputed from
the runs' rows (:func:`helpers.record.flagship_levers.row`). The figures are in
:mod:`helpers.figures.ch08_levers`.
"""

from __future__ import annotations

from helpers.record import results
from helpers.record.flagship_levers import MATMUL_CEILING_TFLOPS, PARTS, row
from helpers.cost.mfu import H200_BF16_PEAK
from helpers.record.flagship_summary import compare
from helpers.run.result_types.records import FlagshipRecord, FlagshipRun

COLUMNS = [
    "run",
    "mbs",
    "tokens/s",
    "MFU %",
    "of reference %",
    "peak GiB",
    "step ms",
    "max |Δ ref|",
    "loss ok",
]


def recorded(name: str) -> FlagshipRecord | None:
    """:func:`helpers.record.results.recorded` on one GPU: ``flagship_levers``,
    ``flagship_levers_h2h``, ``flagship_fp8``."""
    return results.recorded(name, gpus=1)


def ceiling(record: FlagshipRecord) -> float:
    """The record's measured bf16 matmul ceiling in TFLOP/s (the default where none was
    measured)."""
    return record.get("matmul_ceiling_tflops") or MATMUL_CEILING_TFLOPS


def run_ceiling(run: FlagshipRun, record: dict) -> float:
    """The matmul ceiling measured in the invocation that made ``run``: its own field, else the
    one its stored summary was computed with (a run merged from an earlier invocation), else the
    record's."""
    if run.get("matmul_ceiling_tflops"):
        return run["matmul_ceiling_tflops"]
    s = run.get("summary") or {}
    if s.get("ceiling_fraction"):
        return round(s["mfu"] * H200_BF16_PEAK / s["ceiling_fraction"] / 1e12, 1)
    return ceiling(record)


def rows(record: FlagshipRecord) -> list[dict]:
    """Every run of a record as :func:`helpers.record.flagship_levers.row`, each against the
    ceiling measured in its own invocation (:func:`run_ceiling`)."""
    return [row(r["name"], r, run_ceiling(r, record)) for r in record["runs"]]


def table_row(s: dict) -> dict:
    """One run for the table: speed, MFU, the share of the measured reference rate, memory, the
    step and the loss check."""
    if not s["ok"]:
        reason = s["error"].strip().splitlines()[0][:90] if s.get("error") else "failed"
        return {"run": s["name"], "tokens/s": "failed", "loss ok": reason}
    return {
        "run": s["name"],
        "mbs": s["micro_batch"],
        "tokens/s": f"{s['tokens_per_s_per_gpu']:,}",
        "MFU %": f"{100 * s['mfu']:.1f}",
        "of reference %": f"{100 * s['ceiling_fraction']:.1f}",
        "peak GiB": s["peak_gib"],
        "step ms": f"{1000 * s['seconds_per_step']:.1f}",
        "max |Δ ref|": s["max_ref_gap"],
        "loss ok": "yes" if s["loss_ok"] else "NO",
    }


def kernel_rows(record: FlagshipRecord) -> list[dict]:
    """The profiled step of every run that has one, by kind of kernel
    (:func:`helpers.chapters.ch08_flagship.kernel_row`); ``idle``: the step time no kernel
    covered."""
    from helpers.chapters.ch08_flagship import kernel_row

    out = []
    for s in rows(record):
        ms = (s.get("kernels") or {}).get("ms")
        if s["ok"] and ms:
            step = 1000 * s["seconds_per_step"]
            out.append(kernel_row(s["name"], step, ms, step - sum(ms.values())))
    return out


def lever_rows(record: FlagshipRecord) -> list[dict]:
    """The lever record's table rows, in the order run."""
    return [table_row(s) for s in rows(record)]


def by_name(record: FlagshipRecord) -> dict[str, dict]:
    """The record's rows by run name."""
    return {s["name"]: s for s in rows(record)}


def gain(record: FlagshipRecord, name: str, base: str) -> float:
    """Throughput of run ``name`` over run ``base`` in one record."""
    runs = by_name(record)
    return runs[name]["tokens_per_s_per_gpu"] / runs[base]["tokens_per_s_per_gpu"]


def h2h_groups(record: FlagshipRecord) -> list[dict]:
    """The head-to-head's verdict: per run its rounds, median, MFU of the median, spread and
    ratio to FSDP2 (:func:`helpers.record.flagship_summary.compare`)."""
    return compare(rows(record))


def h2h_rows(record: FlagshipRecord) -> list[dict]:
    """The verdict as table rows."""
    return [
        {
            "run": g["name"],
            "rounds": g["rounds"],
            "valid": "yes" if g["valid"] else "NO",
            "tokens/s per round": ", ".join(f"{v:,}" for v in g["tokens_per_s_per_gpu"]),
            "median": f"{g['median']:,.0f}",
            "MFU % (median)": f"{100 * g['mfu_median']:.1f}",
            "spread %": f"{100 * g['spread']:.2f}",
            "vs FSDP2": f"{g['vs_fsdp2']:.4f}",
        }
        for g in h2h_groups(record)
        if g["median"]
    ]


def first_round(record: FlagshipRecord, framework: str) -> dict:
    """The first valid round of ``framework``'s run (the one with the profile, trace and memory
    snapshot)."""
    return next(s for s in rows(record) if s["ok"] and s["framework"] == framework)


# cuBLAS's FP8 kernels on sm90 (nvjet_sm90_qqtst_…: E4M3 × E4M3, qrtst: E4M3 × E5M2, as run)
FP8_WORDS = ("qqtst", "qrtst", "rqtst", "e4m3", "e5m2")


def fp8_kernels(s: dict, top: int = 6) -> list[tuple[str, float]]:
    """The profiled step's kernels whose names say FP8 (longest first, ms per step)."""
    kernels = (s.get("trace") or {}).get("kernels") or {}
    hits = [(n, ms) for n, ms in kernels.items() if any(w in n.lower() for w in FP8_WORDS)]
    return sorted(hits, key=lambda kv: -kv[1])[:top]


def loss_gap(a: dict, b: dict) -> tuple[float, int]:
    """(largest |loss_a − loss_b| over the steps both ran, how many steps) of two runs trained on
    the same batches."""
    pairs = [(x, y) for x, y in zip(a["losses"], b["losses"]) if x is not None and y is not None]
    return max(abs(x - y) for x, y in pairs), len(pairs)


def fp8_rows(record: FlagshipRecord) -> list[dict]:
    """The FP8 record: speed, memory, the loss after 20+ steps and its largest gap to bf16's."""
    runs = rows(record)
    bf16 = next(s for s in runs if s["ok"] and s.get("fp8") == "none")
    out = []
    for s in runs:
        r = table_row(s)
        if s["ok"]:
            gap, n = loss_gap(s, bf16)
            r = {
                "run": s["name"],
                "tokens/s": r["tokens/s"],
                "vs bf16": f"{s['tokens_per_s_per_gpu'] / bf16['tokens_per_s_per_gpu']:.3f}",
                "peak GiB": s["peak_gib"],
                "steps": n,
                "loss last": s["losses"][-1],
                "max |Δ loss| vs bf16": f"{gap:.4f}",
                "matmul ms": f"{(s.get('kernels') or {}).get('ms', {}).get('matmul', 0.0):.1f}",
            }
        out.append(r)
    return out


def model_phases(args: list[str]) -> dict[str, float]:
    """Chapter 7's memory model (:func:`helpers.cost.memory_llama.predict`) for a recorded run's
    flags at world size 1, in GiB, keyed like the snapshot's phase ends: "forward" (end of the
    forward), "backward" (end of the backward), "step" (the optimizer step). With a fused loss
    (``--fused_ce``) the model's logits and loss terms are left out: that loss keeps no logits."""
    from helpers.parallel.train_layout import TrainLayout
    from helpers.cost.memory_llama import predict
    from helpers.train.framework_run import layout_from, parser

    ns = parser().parse_args(args)
    layout = TrainLayout.from_dict({**layout_from(ns).__dict__, "world": 1})
    p = predict(layout)
    fused = ns.fused_ce != "hf"
    forward = p["phases"]["forward"] - (p["head"] + p["loss"]["forward"] if fused else 0.0)
    out = {"forward": forward, "backward": p["phases"]["backward_end"], "step": p["phases"]["step"]}
    return {k: v / 2**30 for k, v in out.items()}


def status(name: str) -> str:
    """A record's provenance, or that it is not recorded yet and the command that makes it."""
    from helpers.record import cli
    from helpers.record.results import describe

    record = recorded(name)
    if record is not None:
        return describe(record)
    part = {v: k for k, v in PARTS.items()}[name]
    command = cli.command("flagship", ["--record", "--gpus", "1", "--levers", part])
    return f"{name}: not recorded yet on 1×H200. On a machine with one GPU: {command}"
