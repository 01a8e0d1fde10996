"""Chapter 3's GPU measurements: collectives vs the α-β model, the communication share, layouts.

Record on a box with two GPUs (results/<hardware>/ch03_collectives.json, ch03_share.json,
ch03_layouts.json):

    python -m helpers.record ch03 --record            # ~5 minutes
    python -m helpers.record ch03 --record --quick    # ~1-2 minutes, the same code paths

Each run is its own torchrun with a timeout; a failing run is recorded with its error text and the
recording goes on. Without GPUs the same code runs on 2 gloo ranks with CPU-sized inputs. The
records are read back by :mod:`helpers.cost.calibration` (the collectives against the α-β
model), :func:`share_rows` (the communication share) and :mod:`helpers.record.ch03_validation`
(the planner's layouts against their measured step times).
"""

from __future__ import annotations

import subprocess
import time

from helpers.parallel.degrees import degree_flags
from helpers.record import cli
from helpers.cost.calibration import MB, collective_table, measured_collectives, worst_error
from helpers.record.results import format_table, save
from helpers.record.runner import run_one
from helpers.run.env import gpu_count
from helpers.run.result_types.ch03 import ShareResult

NPROC = 2
SIZES = {
    "gpu": "4K,16K,64K,256K,1M,4M,16M,64M,256M,1G",
    "gpu_quick": "64K,1M,16M,256M",
    "cpu": "4K,64K,1M,4M",
    "cpu_quick": "4K,64K,1M",
}
SHARE_CASES = {
    "gpu": "tp:2,dp:2,dp:8,ddp:8,tp:8,tp:32,dp:32,ddp:32",
    "gpu_quick": "tp:2,dp:2,dp:8,ddp:8",
    "cpu": "tp:2,dp:2,dp:8,ddp:8",
    "cpu_quick": "tp:2,dp:2",
}
# name -> ch03_layouts flags; a 0.54 B Llama (8 layers, h 2048), global batch 16 × 1024
PLAN_LAYOUTS = {
    "dp=2": [],
    "dp=2 ZeRO-2": ["--zero", "2"],
    "tp=2": degree_flags(tensor=2),
    "tp=2 + split_gather SP": degree_flags(tensor=2, sequence_mode="split_gather"),
    "pp=2, m=4": [*degree_flags(pipeline=2), "--microbatches", "4"],
    "pp=2, m=8": [*degree_flags(pipeline=2), "--microbatches", "8"],
    "sp=2 all_to_all": degree_flags(sequence=2, sequence_mode="all_to_all"),
    "dp=2 + recompute": ["--recompute"],
}
QUICK_LAYOUTS = ("dp=2", "tp=2")
CPU_LAYOUTS = ("dp=2",)
PARTS = ("collectives", "share", "layouts")


def _mode(quick: bool) -> str:
    return ("gpu" if gpu_count() >= NPROC else "cpu") + ("_quick" if quick else "")


def _run(demo: str, args: list[str], timeout_s: float, label: str) -> dict:
    """Launch one run (:func:`helpers.record.runner.run_one`) and keep rank 0's results; a failure
    is recorded with its error text instead of raising."""
    print(f"[ch03] {label}: starting (timeout {timeout_s:.0f} s)", flush=True)
    run = run_one(label, demo, NPROC, args, timeout_s, show="rank0", beat=False)
    run["results"] = [r for r in run["results"] if r.get("rank") == 0]
    if run["ok"]:
        print(f"[ch03] {label}: done in {run['seconds']:.0f} s", flush=True)
    else:
        print(
            f"[ch03] {label}: FAILED after {run['seconds']:.0f} s: {run['error'][:2000]}",
            flush=True,
        )
    return run


def _topology() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20
        ).stdout
    except Exception as err:  # no nvidia-smi on a CPU box
        return f"n/a ({err.__class__.__name__})"


def record_collectives(quick: bool) -> list[dict]:
    mode = _mode(quick)
    on_gpu = mode.startswith("gpu")
    args = ["--sizes", SIZES[mode], "--timing", "loop", "--warmup", "5"]
    args += ["--iters", "20" if on_gpu else "3", "--rounds", "5" if on_gpu else "2"]
    run = _run("ch03_collectives", args, 300, "collectives")
    try:
        import torch

        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "n/a"
    except Exception:
        nccl = "n/a"
    run.update(topology=_topology(), nccl_version=nccl)
    return [run]


def record_share(quick: bool) -> list[dict]:
    mode = _mode(quick)
    return [_run("ch03_share", ["--cases", SHARE_CASES[mode]], 300, "communication share")]


def record_layouts(quick: bool) -> list[dict]:
    mode = _mode(quick)
    names = (
        CPU_LAYOUTS if mode.startswith("cpu") else QUICK_LAYOUTS if quick else tuple(PLAN_LAYOUTS)
    )
    runs = []
    for name in names:
        extra = ["--steps", "3", "--warmup", "1"] if quick else []
        run = _run("ch03_layouts", PLAN_LAYOUTS[name] + extra, 180, f"layout {name}")
        runs.append({"layout": name, "flags": PLAN_LAYOUTS[name], **run})
    return runs


def share_rows(results: list[ShareResult]) -> list[dict]:
    """One row per measured case of ch03_share."""
    return [
        {
            "layout": r["layout"],
            "global batch": r["global_batch"],
            "step ms": round(r["t_step"] * 1e3, 2),
            "compute ms": round(r["t_compute"] * 1e3, 2),
            "comm ms": round(r["t_comm"] * 1e3, 2),
            "share": round(r["share"], 2),
            "tokens/s": round(r["tokens_per_s"]),
            "> 0.5": "yes" if r["above_half"] else "no",
        }
        for r in results
    ]


def _show_calibration(runs: list[dict], quick: bool) -> None:
    """Print the collectives' table and store it (and the fitted link) in the record's run."""
    min_bytes = MB if _mode(quick).startswith("gpu") else 1  # CPU: exercise the path
    table, link = collective_table(measured_collectives(runs), min_bytes=min_bytes)
    cols = ["collective", "size", "measured us", "predicted us", "error %", "busbw GB/s", "role"]
    print(format_table(table, cols))
    print(
        f"link: latency {link.latency_s * 1e6:.1f} us, "
        f"bandwidth {link.bandwidth_bytes_per_s / 1e9:.1f} GB/s;"
        f" worst: {worst_error(table, min_bytes)}"
    )
    runs[0]["table"] = table
    runs[0]["link"] = {
        "latency_s": link.latency_s,
        "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s,
    }


def record(quick: bool = False, only: list[str] | None = None, save_results: bool = False) -> None:
    """Every part of ``only`` (default: all three) in turn, each saved as ch03_<part>.json."""
    words = ["--record"] + (["--quick"] if quick else []) + (["--only", *only] if only else [])
    command = cli.command("ch03", words)
    t0 = time.monotonic()
    parts = {"collectives": record_collectives, "share": record_share, "layouts": record_layouts}
    for key, recorder in parts.items():
        if only and key not in only:
            continue
        runs = recorder(quick)
        if key == "collectives" and runs[0]["ok"]:
            try:
                _show_calibration(runs, quick)
            except Exception as err:  # never lose the measurements over the analysis
                print(f"[ch03] calibration failed: {err}")
        if key == "share" and runs[0]["ok"]:
            rows = share_rows(runs[0]["results"])
            print(format_table(rows, list(rows[0])))
        if save_results:
            print("[ch03] wrote", save(f"ch03_{key}", runs, command), flush=True)
    print(f"[ch03] recording finished in {time.monotonic() - t0:.0f} s", flush=True)


SPEC = cli.Recorder(
    "ch03",
    "Chapter 3: collectives against the α-β model, the communication share, planner layouts",
    "ch03_<part>.json (collectives, share, layouts)",
    lambda args: record(args.quick, args.only, args.record),
    flags=("quick", "only"),
    quick="a 1-2 minute version of the same code paths",
    only=PARTS,
)
