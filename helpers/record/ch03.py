"""Chapter 3's GPU measurements: collectives vs the α-β model, the communication share, planner layouts.

Record on a box with two GPUs (results/<hardware>/ch03_collectives.json, ch03_share.json,
ch03_layouts.json):

    python -m helpers.record.ch03 --record            # ~5 minutes
    python -m helpers.record.ch03 --record --quick    # ~1-2 minutes, the same code paths

Each run is its own torchrun with a timeout; a failing run is recorded with its error text and the
recording goes on. Without GPUs the same code runs on 2 gloo ranks with CPU-sized inputs.

The calibration is done once and then checked on what it did not see: :func:`calibrate` fits α and
β (:func:`helpers.cost.comm.fit_link`, relative errors) to the all-reduce times at every other size from
1 MB up; every other (collective, size) is *predicted* by :func:`helpers.cost.comm.collective_time` with
that one link, the bytes each collective sends per rank (ring volumes) and nothing else.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import time

from helpers.cost.comm import Link, collective_time, fit_link, ring_steps
from helpers.run.env import gpu_count
from helpers.run.launch import launch, torchrun_command
from helpers.parallel.layouts import Layout
from helpers.cost.planner import Hardware, Model, plan_layout
from helpers.record.results import format_table, save

NPROC = 2
MB = 2**20
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
PLAN_LAYOUTS = {  # name -> ch03_layouts flags; a 0.54 B Llama (8 layers, h 2048), global batch 16 × 1024
    "dp=2": [],
    "dp=2 ZeRO-2": ["--zero", "2"],
    "tp=2": ["--tp", "2"],
    "tp=2 + split_gather SP": ["--tp", "2", "--sp_mode", "split_gather"],
    "pp=2, m=4": ["--pp", "2", "--microbatches", "4"],
    "pp=2, m=8": ["--pp", "2", "--microbatches", "8"],
    "sp=2 all_to_all": ["--sp", "2", "--sp_mode", "all_to_all"],
    "dp=2 + recompute": ["--recompute"],
}
QUICK_LAYOUTS = ("dp=2", "tp=2")
CPU_LAYOUTS = ("dp=2",)
CANONICAL = {
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all_single": "all_to_all",
}


def _mode(quick: bool) -> str:
    return ("gpu" if gpu_count() >= NPROC else "cpu") + ("_quick" if quick else "")


def _run(demo: str, args: list[str], timeout_s: float, label: str) -> dict:
    """Launch one run; on failure return {'error': ...} instead of raising."""
    command = shlex.join(torchrun_command(demo, NPROC, args))
    t0 = time.monotonic()
    print(f"[ch03] {label}: starting (timeout {timeout_s:.0f} s)", flush=True)
    try:
        result = launch(demo, NPROC, args, timeout_s=timeout_s, show="rank0")
    except Exception as err:  # a failed run is recorded, not fatal
        print(
            f"[ch03] {label}: FAILED after {time.monotonic() - t0:.0f} s: {str(err)[:2000]}",
            flush=True,
        )
        return {"name": label, "command": command, "error": str(err)[-4000:]}
    print(f"[ch03] {label}: done in {result.seconds:.0f} s", flush=True)
    return {
        "name": label,
        "command": command,
        "seconds": round(result.seconds, 1),
        "results": result.rank(0),
    }


def _topology() -> str:
    try:
        return subprocess.run(
            ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20
        ).stdout
    except Exception as err:  # no nvidia-smi on a CPU box
        return f"n/a ({err.__class__.__name__})"


def record_collectives(quick: bool) -> list[dict]:
    mode = _mode(quick)
    args = [
        "--sizes",
        SIZES[mode],
        "--timing",
        "loop",
        "--warmup",
        "5",
        "--iters",
        "20" if mode.startswith("gpu") else "3",
        "--rounds",
        "5" if mode.startswith("gpu") else "2",
    ]
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


# --- turning measurements into the chapter's table -------------------------------------------------


def measured_collectives(record_runs: list[dict]) -> list[dict]:
    """The benchmark rows (collective, size_bytes, seconds, busbw) of a ch03_collectives record."""
    rows = []
    for run in record_runs:
        for r in run.get("results", []):
            rows.append({**r, "collective": CANONICAL.get(r["collective"], r["collective"])})
    return rows


MODELS = ("host_floor", "alpha_beta", "ring_steps")


def host_floors(rows: list[dict], below: int = MB) -> dict[str, float]:
    """Per collective, the fastest call among messages smaller than ``below``: the fixed cost of one
    call (issuing it on the host through torch.distributed and NCCL, starting its kernel), which
    back-to-back calls cannot beat. The benchmark does not separate the host and GPU parts."""
    floors: dict[str, float] = {}
    for r in rows:
        if r["size_bytes"] < below:
            floors[r["collective"]] = min(floors.get(r["collective"], float("inf")), r["seconds"])
    return floors


def calibrate(
    rows: list[dict], model: str = "host_floor", min_bytes: int = MB
) -> tuple[Link, list[int], dict]:
    """Fit one link (α, β) to all-reduce times at every other size; return it, the sizes used, the floors.

    ``alpha_beta``: sizes >= ``min_bytes``, t = α + bytes/β. ``ring_steps``: the same fit, α then
    charged per ring step (2(n-1) for all-reduce, n-1 for the others; Thakur et al. 2005).
    ``host_floor``: t = max(floor of the collective, α + bytes/β), the link fitted only where the
    all-reduce is bound by the GPU (time > 2 × its floor), the floors from messages < ``min_bytes``.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, not {model!r}")
    n = rows[0]["n"]
    floors = host_floors(rows, min_bytes) if model == "host_floor" else {}
    allreduce = sorted(
        (r["size_bytes"], r["seconds"]) for r in rows if r["collective"] == "all_reduce"
    )
    if model == "host_floor":
        candidates = [
            s for s, t in allreduce if s >= min_bytes and t > 2 * floors.get("all_reduce", 0.0)
        ]
    else:
        candidates = [s for s, _ in allreduce if s >= min_bytes]
    used = candidates[::2] if len(candidates) >= 4 else candidates
    link = fit_link(
        [(s, t) for s, t in allreduce if s in used],
        "fitted to all-reduce",
        collective="all_reduce",
        n=n,
        relative=True,
    )
    if model == "ring_steps":
        link = Link(
            "fitted to all-reduce, latency per ring step",
            link.bandwidth_bytes_per_s,
            link.latency_s / ring_steps("all_reduce", n),
        )
    return link, used, floors


def predict(
    collective: str,
    size_bytes: int,
    n: int,
    link: Link,
    model: str = "host_floor",
    floors: dict | None = None,
) -> float:
    """Seconds per call under ``model`` (see :func:`calibrate`)."""
    t = collective_time(collective, size_bytes, n, link, per_step=model == "ring_steps")
    return max(t, (floors or {}).get(collective, 0.0)) if model == "host_floor" else t


def collective_table(
    rows: list[dict], model: str = "host_floor", min_bytes: int = MB
) -> tuple[list[dict], Link]:
    """Predicted vs measured time for every (collective, size) with its error and its role: ``fit``
    (the all-reduce points the link was fitted to), ``floor`` (small messages that set the host
    floors, host_floor model only) or ``held out`` (a prediction)."""
    link, used, floors = calibrate(rows, model, min_bytes)
    table = []
    for r in sorted(rows, key=lambda r: (r["collective"], r["size_bytes"])):
        predicted = predict(r["collective"], r["size_bytes"], r["n"], link, model, floors)
        role = (
            "fit"
            if r["collective"] == "all_reduce" and r["size_bytes"] in used
            else "floor"
            if floors and r["size_bytes"] < min_bytes
            else "held out"
        )
        table.append(
            {
                "collective": r["collective"],
                "size": _size(r["size_bytes"]),
                "size_bytes": r["size_bytes"],
                "measured us": round(r["seconds"] * 1e6, 1),
                "predicted us": round(predicted * 1e6, 1),
                "error %": round(100 * (predicted - r["seconds"]) / r["seconds"], 1),
                "busbw GB/s": round(r["busbw"] / 1e9, 1),
                "role": role,
            }
        )
    return table, link


def _size(b: int) -> str:
    for unit, div in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if b >= div and b % div == 0:
            return f"{b // div}{unit}"
    return str(b)


def worst_error(table: list[dict], min_bytes: int = MB) -> dict:
    """The held-out row with the largest |error| among messages of at least ``min_bytes``."""
    return max(
        (r for r in table if r["size_bytes"] >= min_bytes and r["role"] == "held out"),
        key=lambda r: abs(r["error %"]),
    )


def share_rows(results: list[dict]) -> list[dict]:
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


def busbw_figure(table: list[dict]):
    """Left: measured bus bandwidth against message size, per collective. Right: predicted against
    measured time, with the ±25 % band; fitted points hollow, floor-setting small messages as crosses."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=80)
    for name in sorted({r["collective"] for r in table}):
        rows = [r for r in table if r["collective"] == name]
        left.plot(
            [r["size_bytes"] for r in rows], [r["busbw GB/s"] for r in rows], marker="o", label=name
        )
        colour = left.lines[-1].get_color()
        for role, marker, face in (
            ("held out", "o", colour),
            ("fit", "o", "none"),
            ("floor", "x", colour),
        ):
            pts = [r for r in rows if r["role"] == role]
            right.scatter(
                [r["measured us"] for r in pts],
                [r["predicted us"] for r in pts],
                s=18,
                marker=marker,
                facecolors=face,
                edgecolors=colour if marker == "o" else None,
            )
    left.set(
        xscale="log",
        xlabel="message size S (bytes)",
        ylabel="bus bandwidth (GB/s)",
        title="measured busbw",
    )
    left.legend(fontsize=8)
    lo, hi = min(r["measured us"] for r in table), max(r["measured us"] for r in table)
    line = [lo, hi]
    right.plot(line, line, "k-", lw=0.8)
    right.fill_between(
        line,
        [x * 0.75 for x in line],
        [x * 1.25 for x in line],
        color="grey",
        alpha=0.2,
        label="±25 %",
    )
    right.set(
        xscale="log",
        yscale="log",
        xlabel="measured (µs)",
        ylabel="predicted (µs)",
        title="model calibrated on all-reduce",
    )
    right.legend(fontsize=8)
    fig.tight_layout()
    return fig


def layout_of_run(r: dict) -> tuple[Layout, bool]:
    """The planner's Layout (and recompute flag) of one ch03_layouts result."""
    batch = r["model"]["batch"]
    m = r["microbatches"] if r["pp"] > 1 else 1  # without a pipeline the per-rank batch is one pass
    sp = r["sp"] if r["sp_mode"] == "all_to_all" else 1
    return Layout(
        r["dp"], r["tp"], r["pp"], sp, r["sp_mode"], batch // (r["dp"] * m), r["zero"]
    ), r["recompute"]


def model_of_run(r: dict) -> Model:
    d = r["model"]
    ffn = (8 * d["hidden"] // 3 + 63) // 64 * 64  # helpers.models.llama.llama_config's SwiGLU width
    return Model(
        "measured Llama",
        d["layers"],
        d["hidden"],
        d["heads"],
        d["heads"],
        ffn,
        d["vocab"],
        d["seq"],
    )


def validation_rows(runs: list[dict], hw: Hardware) -> list[dict]:
    """Measured step time of each recorded layout next to the planner's estimate and both ranks."""
    rows = []
    for run in runs:
        if "results" not in run:
            rows.append(
                {
                    "layout": run["layout"],
                    "measured ms": "failed",
                    "error": run.get("error", "")[-200:],
                }
            )
            continue
        r = run["results"][0]
        layout, recompute = layout_of_run(r)
        p = plan_layout(model_of_run(r), layout, r["model"]["batch"], hw, recompute)
        rows.append(
            {
                "layout": run["layout"],
                "measured ms": round(r["step_s"] * 1e3, 1),
                "planner ms": round(p.step_s * 1e3, 1),
                "measured GiB": r["peak_gib"],
                "planner GiB": round(p.memory_gib, 1),
            }
        )
    ok = [r for r in rows if r["measured ms"] != "failed"]
    for key, rank in (("measured ms", "measured rank"), ("planner ms", "planner rank")):
        for i, r in enumerate(sorted(ok, key=lambda r: r[key])):
            r[rank] = i + 1
    return rows


def rank_agreement(rows: list[dict]) -> float:
    """Spearman's rank correlation between the planner's and the measured order (1 = same order)."""
    ok = [r for r in rows if "planner rank" in r]
    n = len(ok)
    if n < 2:
        return float("nan")
    d2 = sum((r["planner rank"] - r["measured rank"]) ** 2 for r in ok)
    return 1 - 6 * d2 / (n * (n * n - 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="save results/<hardware>/ch03_*.json")
    parser.add_argument(
        "--quick", action="store_true", help="a 1-2 minute version of the same code paths"
    )
    parser.add_argument("--only", choices=["collectives", "share", "layouts"], default=None)
    args = parser.parse_args()
    command = "python -m helpers.record.ch03 --record" + (" --quick" if args.quick else "")
    t0 = time.monotonic()
    parts = {"collectives": record_collectives, "share": record_share, "layouts": record_layouts}
    for key, record in parts.items():
        if args.only and key != args.only:
            continue
        runs = record(args.quick)
        if key == "collectives" and "results" in runs[0]:
            try:
                min_bytes = (
                    MB if _mode(args.quick).startswith("gpu") else 1
                )  # CPU: exercise the path
                table, link = collective_table(measured_collectives(runs), min_bytes=min_bytes)
                cols = [
                    "collective",
                    "size",
                    "measured us",
                    "predicted us",
                    "error %",
                    "busbw GB/s",
                    "role",
                ]
                print(format_table(table, cols))
                print(
                    f"link: latency {link.latency_s * 1e6:.1f} us, bandwidth {link.bandwidth_bytes_per_s / 1e9:.1f} GB/s;"
                    f" worst: {worst_error(table, min_bytes)}"
                )
                runs[0]["table"], runs[0]["link"] = (
                    table,
                    {
                        "latency_s": link.latency_s,
                        "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s,
                    },
                )
            except Exception as err:  # never lose the measurements over the analysis
                print(f"[ch03] calibration failed: {err}")
        if key == "share" and "results" in runs[0]:
            rows = share_rows(runs[0]["results"])
            print(format_table(rows, list(rows[0])))
        if args.record:
            print("[ch03] wrote", save(f"ch03_{key}", runs, command), flush=True)
    print(f"[ch03] recording finished in {time.monotonic() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
