"""Chapter 7's GPU measurements: every layout of the memory table, run, recorded and compared.

Record on a box with two GPUs (results/<hardware>/ch07_memory.json), about 6 minutes:

    python -m helpers.record.ch07 --record          # all layouts
    python -m helpers.record.ch07 --record --quick  # three layouts, a smoke test (ch07_memory_quick.json)
    python -m helpers.record.ch07 --record --only "TP=2 bf16"  # re-record some, keep the others
    python -m helpers.record.ch07 --record --gpus 1 --budget_s 180   # one GPU -> results/1x<GPU>/ch07_memory.json

Each layout is one torchrun of ``helpers.demos.ch07_memory`` with its own timeout; a failing
layout is recorded with its error and the recording goes on. ``--gpus N`` runs every layout at
world size N (:func:`layouts_for`: at world 1 the layouts that need two GPUs, tensor and pipeline
parallelism, are recorded as not run, and so is ZeRO-1 bf16, which there is ZeRO-2 bf16 again: one
rank holds every shard); ``--budget_s`` records the layouts it leaves no time for as not run. The
memory model predicts each rank at the layout's own world size, so the comparison of measured and
predicted peaks is the same at 1 GPU as at 2 (:func:`world_rows` puts them side by side).
"""

from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path

from dataclasses import replace

from helpers.run.launch import LaunchError, launch, torchrun_command
from helpers.config.layout import TrainLayout
from helpers.record.runner import heartbeat, world_mismatch
from helpers.record.results import (
    box_label,
    earlier as results_earlier,
    find,
    format_table,
    load,
    merge_runs,
    save,
)

NPROC = 2
MIB = 2**20
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
GIB = 2**30
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
ONE_GPU_COMMAND = (
    "python -m helpers.record.ch07 --record --gpus 1"  # every layout that runs on one GPU, ~5 min
)
ONE_GPU_BUDGET_S = 180  # at least this in the book's one-GPU device call (it gets what the recorders before it left)
LAYOUT_S = 30  # about what one layout's torchrun takes on an H200 (the 2-GPU record: 23-43 s, HybridAdam built)
MIN_LEFT_S = 40  # a layout is not started with less than this left of the budget


def layout_named(name: str, world: int = NPROC) -> TrainLayout:
    """The layout called ``name``, at world size ``world`` (ValueError if it cannot run there)."""
    layout = next(x for x in LAYOUTS if x.name == name)
    return layout if layout.world == world else replace(layout, world=world)


def not_at_world(name: str, world: int) -> str | None:
    """Why layout ``name`` is not run at world size ``world``, or None when it is."""
    layout = next(x for x in LAYOUTS if x.name == name)
    if world % (layout.tp * layout.pp):
        return f"needs {layout.tp * layout.pp} GPUs (tp·pp = {layout.tp * layout.pp})"
    if world == 1 and name in SAME_AT_WORLD1:
        return f"at world 1 the same layout as {SAME_AT_WORLD1[name]}: one rank holds every shard"
    return None


def within(names: list[str], budget_s: float, layout_s: float = LAYOUT_S) -> list[str]:
    """The leading ``names`` a budget should start, at ``layout_s`` each (a layout starts while at least
    MIN_LEFT_S is left): the budget arithmetic of a recording."""
    started, t = [], 0.0
    for n in names:
        if budget_s - t < MIN_LEFT_S:
            break
        started.append(n)
        t += layout_s
    return started


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


def run_layout(layout: TrainLayout, timeout_s: float = 150, show: str = "rank0") -> dict:
    """One torchrun of ``layout.world`` ranks; the record keeps every rank's result or the error text."""
    args, nproc = layout.to_args(), layout.world
    record = {
        "name": layout.name,
        "args": args,
        "world": nproc,
        "command": shlex.join(torchrun_command("ch07_memory", nproc, args)),
    }
    start = time.monotonic()
    try:
        result = launch("ch07_memory", nproc, args, timeout_s=timeout_s, show=show)
        record["ranks"] = result.results
    except LaunchError as error:
        record["error"] = str(error)[-3000:]
    record["seconds"] = round(time.monotonic() - start, 1)
    return record


def summary(record: dict) -> dict:
    """Measured and predicted peak of the rank that uses most (the one that decides OOM)."""
    from helpers.cost.memory_llama import predict

    if "ranks" not in record:
        known = [x for x in LAYOUTS if x.name == record["name"]]
        try:  # the model at the world size the layout was to run at
            layout = replace(known[0], world=record.get("world", known[0].world)) if known else None
        except ValueError:  # tp·pp does not divide that world: nothing to predict
            layout = None
        out = {
            "layout": record["name"],
            "error": _cause(record.get("error")),
            "predicted": max(predict(layout, r)["peak"] for r in range(layout.world))
            if layout
            else None,
        }
        return {**out, "not_run": record["not_run"]} if record.get("not_run") else out
    layout = TrainLayout.from_dict(record["ranks"][0]["layout"])
    ranks = sorted(record["ranks"], key=lambda r: r["measured"]["peak"] if r["measured"] else 0)
    worst = ranks[-1]
    measured = worst["measured"]["peak"] if worst["measured"] else None
    predicted = predict(layout, rank=worst["rank"])["peak"]
    error = None if measured is None else 100 * (predicted - measured) / measured
    at_recording = worst.get("prediction", {}).get(
        "peak"
    )  # the model as it was when the run was recorded
    first_error = (
        None
        if measured is None or at_recording is None
        else 100 * (at_recording - measured) / measured
    )
    return {
        "layout": record["name"],
        "rank": worst["rank"],
        "measured": measured,
        "predicted": predicted,
        "error_pct": error,
        "error_pct_at_recording": first_error,
        "tokens_per_s": sum(r["tokens_per_s"] for r in record["ranks"]) / len(record["ranks"]),
        "outside_allocator": worst["measured"]["outside_allocator"] if worst["measured"] else None,
        "peak_reserved": worst["measured"]["peak_reserved"] if worst["measured"] else None,
    }


def table_rows(records: list[dict]) -> list[dict]:
    rows = []
    for r in map(summary, records):
        if r.get("not_run"):
            rows.append(
                {
                    "layout": r["layout"],
                    "measured MiB": "not run",
                    "predicted MiB": f"{r['predicted'] / MIB:.0f}" if r["predicted"] else "",
                    "error %": "not run: " + r["not_run"][:72],
                }
            )
            continue
        if "error" in r:
            rows.append(
                {
                    "layout": r["layout"],
                    "measured MiB": "failed",
                    "predicted MiB": f"{r['predicted'] / MIB:.0f}" if r["predicted"] else "",
                    "error %": "not recorded: " + r["error"][:72],
                }
            )
            continue
        rows.append(
            {
                "layout": r["layout"],
                "measured MiB": f"{r['measured'] / MIB:.0f}" if r["measured"] else "-",
                "predicted MiB": f"{r['predicted'] / MIB:.0f}",
                "error %": f"{r['error_pct']:+.1f}" if r["error_pct"] is not None else "-",
                "error % at recording": (
                    f"{r['error_pct_at_recording']:+.1f}"
                    if r["error_pct_at_recording"] is not None
                    else "-"
                ),
                "reserved MiB": f"{r['peak_reserved'] / MIB:.0f}" if r["peak_reserved"] else "-",
                "outside allocator MiB": f"{r['outside_allocator'] / MIB:.0f}"
                if r["outside_allocator"]
                else "-",
                "tokens/s": f"{r['tokens_per_s']:.0f}",
            }
        )
    return rows


def measured_rows(record: dict) -> list[dict]:
    """summary() of every recorded layout that produced a measurement."""
    return [r for r in map(summary, record["runs"]) if r.get("measured")]


def worst_error(record: dict) -> dict:
    """The layout the model misses most (by |error|)."""
    return max(measured_rows(record), key=lambda r: abs(r["error_pct"]))


def accuracy_figure(record: dict):
    """Predicted against measured peak per layout, with the ±10 % band."""
    import matplotlib.pyplot as plt

    rows = measured_rows(record)
    fig, ax = plt.subplots(figsize=(6.4, 5.2), dpi=80)
    top = 1.1 * max(max(r["measured"], r["predicted"]) for r in rows) / GIB
    line = [0, top]
    ax.fill_between(
        line, [0.9 * x for x in line], [1.1 * x for x in line], color="#dddddd", label="±10 %"
    )
    ax.plot(line, line, color="grey", lw=1)
    for i, r in enumerate(rows, 1):
        colour = "#4C72B0" if abs(r["error_pct"]) <= 10 else "#C44E52"
        ax.scatter(r["measured"] / GIB, r["predicted"] / GIB, color=colour, zorder=3)
        ax.annotate(
            str(i),
            (r["measured"] / GIB, r["predicted"] / GIB),
            textcoords="offset points",
            xytext=(4, 3),
            fontsize=8,
        )
    ax.set(
        xlim=(0, top),
        ylim=(0, top),
        xlabel="measured max_memory_allocated (GiB)",
        ylabel="predicted peak (GiB)",
        title="Memory model against the GPU, per layout",
    )
    ax.legend(loc="upper left")
    ax.text(
        1.02,
        1.0,
        "\n".join(f"{i}  {r['layout']}  {r['error_pct']:+.1f} %" for i, r in enumerate(rows, 1)),
        transform=ax.transAxes,
        va="top",
        fontsize=8,
        family="monospace",
    )
    return fig


def technique_rows(record: dict, names: list[str] = TECHNIQUES) -> list[dict]:
    """Memory and throughput of each technique next to plain fp32 DDP (1.00)."""
    by_name = {r["layout"]: r for r in measured_rows(record)}
    base = by_name.get(names[0])
    rows = []
    for name in names:
        r = by_name.get(name)
        if r is None:
            continue
        rows.append(
            {
                "layout": name,
                "peak GiB": f"{r['measured'] / GIB:.2f}",
                "memory vs DDP fp32": f"{r['measured'] / base['measured']:.2f}" if base else "-",
                "tokens/s": f"{r['tokens_per_s']:.0f}",
                "speed vs DDP fp32": f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}"
                if base
                else "-",
            }
        )
    return rows


def recorded_layouts(record: dict) -> dict[str, TrainLayout]:
    """name -> the layout each measured run ran (its world size included), read from its ranks."""
    return {
        r["name"]: TrainLayout.from_dict(r["ranks"][0]["layout"])
        for r in record["runs"]
        if r.get("ranks")
    }


def technique_figure(record: dict, names: list[str] = TECHNIQUES):
    """Left: the predicted peak split into its parts, the measured peak as a diamond. Right: tokens/s."""
    import matplotlib.pyplot as plt

    from helpers.cost.memory_llama import predict

    by_name = {r["layout"]: r for r in measured_rows(record)}
    names = [n for n in names if n in by_name]
    layouts = recorded_layouts(record)
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(11, 4.2), dpi=80, sharey=True, gridspec_kw={"width_ratios": [3, 2]}
    )
    colours = ["#4C72B0", "#8172B3", "#DD8452", "#937860", "#55A868", "#C44E52", "#8C8C8C"]
    for y, name in enumerate(names):
        r = by_name[name]
        parts = predict(layouts[name], rank=r["rank"])["breakdown"]
        x = 0.0
        for (part, value), colour in zip(parts.items(), colours):
            left.barh(y, value / GIB, left=x, color=colour, label=part if y == 0 else None)
            x += value / GIB
        left.scatter(
            r["measured"] / GIB,
            y,
            marker="D",
            color="black",
            zorder=3,
            label="measured" if y == 0 else None,
        )
        right.barh(y, r["tokens_per_s"] / 1e3, color="#55A868")
    left.set(yticks=range(len(names)), yticklabels=names, xlabel="peak memory per GPU (GiB)")
    left.invert_yaxis()
    left.legend(fontsize=8, loc="lower right")
    right.set(xlabel="throughput (thousand tokens/s, both GPUs)")
    fig.suptitle("What each technique saves, and what it costs in time")
    fig.tight_layout()
    return fig


def predicted_rows(layouts: list[TrainLayout] = LAYOUTS) -> list[dict]:
    """The model's answer for every layout, on the rank that needs most."""
    from helpers.cost.memory_llama import predict

    rows = []
    for layout in layouts:
        p = max((predict(layout, r) for r in range(layout.world)), key=lambda x: x["peak"])
        rows.append(
            {
                "layout": layout.name,
                "rank": p["rank"],
                "params/rank (M)": f"{p['params'] / 1e6:.0f}",
                "model states GiB": f"{p['persistent'] / GIB:.2f}",
                "activations GiB": f"{(p['activations'] + p['head']) / GIB:.2f}",
                "peak phase": p["peak_phase"],
                "peak GiB": f"{p['peak'] / GIB:.2f}",
            }
        )
    return rows


def activation_rows(shape=None, tokens: int = 4096, seq: int = 1024) -> list[dict]:
    """Bytes per token and layer of each part, HF Llama against Korthikanti's 34·h (GPT, 16-bit)."""
    from helpers.config.layout import LlamaShape
    from helpers.cost.memory_llama import layer_activation_parts

    shape = shape or LlamaShape()
    rows = []
    for label, e, attn in (
        ("bf16, sdpa", 2, "sdpa"),
        ("fp32, sdpa", 4, "sdpa"),
        ("bf16, eager", 2, "eager"),
    ):
        parts = layer_activation_parts(shape, tokens, seq, e, attn=attn)
        row = {"precision, attention": label}
        row.update({k: f"{v / tokens / shape.hidden:.1f}·h" for k, v in parts.items()})
        row["layer total"] = f"{sum(parts.values()) / tokens / shape.hidden:.1f}·h"
        rows.append(row)
    a, s, h = shape.heads, seq, shape.hidden
    rows.append(
        {
            "precision, attention": "Korthikanti (GPT, 16-bit)",
            "layer total": f"34·h flash, {34 + 5 * a * s / h:.0f}·h with 5as/h",
        }
    )
    return rows


def phase_rows(record: dict, names: list[str]) -> list[dict]:
    """Measured phase peaks (one step, allocator peak reset between phases) next to the model's."""
    from helpers.cost.memory_llama import predict

    runs = {r["name"]: r for r in record["runs"] if "ranks" in r}
    rows = []
    for name in names:
        if name not in runs:
            continue
        rank = max(runs[name]["ranks"], key=lambda r: r["measured"]["peak"])
        layout = TrainLayout.from_dict(rank["layout"])  # at the world size it ran at
        phases, model = rank["phases"], predict(layout, rank["rank"])["phases"]
        model["forward_backward"] = max(
            model["forward"], model["backward_start"], model["backward_end"]
        )
        model["backward"] = max(model["backward_start"], model["backward_end"])
        row = {
            "layout": name,
            "rank": rank["rank"],
            "start GiB": f"{phases['start']['allocated'] / GIB:.2f}",
            "start model": f"{predict(layout, rank['rank'])['persistent'] / GIB:.2f}",
        }
        for key in ("forward", "backward", "forward_backward", "step"):
            if key in phases:
                row[f"{key} GiB"] = f"{phases[key]['peak'] / GIB:.2f}"
                row[f"{key} model"] = f"{model[key] / GIB:.2f}"
        rows.append(row)
    return rows


def show_recorded(gpus: int = NPROC) -> str:
    from helpers.record.results import describe

    record = load("ch07_memory", gpus=gpus)
    rows = table_rows(record["runs"])
    return describe(record) + "\n\n" + format_table(rows, list(rows[0]))


def world_rows(
    one: dict | None = None, two: dict | None = None, names: list[str] | None = None
) -> list[dict]:
    """Chapter 7's memory table at world size 1 beside world size 2: per layout, each box's measured
    peak (the rank that uses most), the model's prediction for that world size and its error, and
    tokens/s per GPU. ``one``/``two``: the records (default: results/1x…/ and 2x…/ch07_memory.json).
    Without a one-GPU record its cells say "not recorded yet on 1×H200" with the command, and the
    prediction for world 1 is still shown (it needs no GPU)."""
    from helpers.cost.memory_llama import predict

    one = one if one is not None else find("ch07_memory", gpus=1)
    two = two if two is not None else find("ch07_memory", gpus=2)
    sides = [(2, two, box_label(two, 2)), (1, one, box_label(one, 1))]
    summaries = {
        world: {r["name"]: summary(r) for r in (record or {}).get("runs", [])}
        for world, record, _ in sides
    }
    rows = []
    for layout in LAYOUTS:
        if names and layout.name not in names:
            continue
        row, notes, peaks = {"layout": layout.name}, [], {}
        for world, record, label in sides:
            s = summaries[world].get(layout.name)
            try:
                at = layout_named(layout.name, world)
                model = max(predict(at, r)["peak"] for r in range(at.world))
            except ValueError:  # tp·pp does not divide this world size
                at, model = None, None
            if at is not None and sharding_note(at):
                notes.append(sharding_note(at))
            if s and s.get("measured"):
                peaks[world] = s["measured"]
                row.update(
                    {
                        f"{label} measured GiB": f"{s['measured'] / GIB:.2f}",
                        f"{label} predicted GiB": f"{s['predicted'] / GIB:.2f}",
                        f"{label} error %": f"{s['error_pct']:+.1f}",
                        f"{label} tokens/s per GPU": f"{s['tokens_per_s'] / world:,.0f}",
                    }
                )
                continue
            if s is not None:
                cell = (
                    "not run: " + s["not_run"]
                    if s.get("not_run")
                    else "failed: " + s.get("error", "?")
                )
            elif record is None:
                cell = f"not recorded yet on {label}"
                notes.append(
                    f"record it with: {ONE_GPU_COMMAND}"
                    if world == 1
                    else "record it with: python -m helpers.record.ch07 --record"
                )
            else:
                why = not_at_world(layout.name, world)
                cell = "not run: " + why if why else f"not in the {label} record"
            row.update(
                {
                    f"{label} measured GiB": cell,
                    f"{label} predicted GiB": f"{model / GIB:.2f}" if model else "—",
                    f"{label} error %": "—",
                    f"{label} tokens/s per GPU": "—",
                }
            )
        row["1 GPU / 2 GPUs peak"] = f"{peaks[1] / peaks[2]:.2f}" if len(peaks) == 2 else "—"
        row["note"] = "; ".join(dict.fromkeys(notes))
        rows.append(row)
    return rows


def _cause(error: str | None) -> str:
    """A failed run's cause in one line: a timeout's first sentence, else the error's last line."""
    lines = (error or "?").strip().splitlines() or ["?"]
    if (
        "ran past its" in lines[0]
    ):  # helpers.run.launch.LaunchTimeout: the rest is the ranks' last lines
        return lines[0].split(";")[0].removeprefix("helpers.demos.ch07_memory ")
    return lines[-1][:120]


def one_gpu_status(one: dict | None = None) -> str:
    """The one-GPU record's provenance, or that it is not recorded yet and the command that makes it."""
    from helpers.record.results import describe

    one = one if one is not None else find("ch07_memory", gpus=1)
    if one is None:
        return (
            f"ch07_memory: not recorded yet on 1×H200. On a machine with one GPU: {ONE_GPU_COMMAND}"
        )
    return describe(one)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--record", action="store_true", help="write results/<hardware>/ch07_memory.json"
    )
    p.add_argument("--quick", action="store_true", help=f"only {QUICK} (those that run at --gpus)")
    p.add_argument("--only", nargs="*", default=None, help="layout names to run")
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help=f"world size of every layout (default {NPROC}); those that need more are recorded as not run",
    )
    p.add_argument(
        "--budget_s",
        type=float,
        default=None,
        help="no layout is started after this many seconds (recorded as not run); default: no limit",
    )
    p.add_argument(
        "--copy_to", default=None, help="also copy the record here after every layout (e.g. $OUT)"
    )
    return p


def plan(
    gpus: int = NPROC, quick: bool = False, only: list[str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """(layouts to run, {layout: why not run}) of a recording: :func:`layouts_for`, narrowed by
    ``quick`` or ``only`` (a name ``only`` asks for that cannot run at ``gpus`` is a ValueError)."""
    names, skipped = layouts_for(gpus)
    known = {x.name for x in LAYOUTS}
    for n in only or []:
        if n not in known:
            raise ValueError(f"unknown layout {n!r}: one of {sorted(known)}")
        if n in skipped:
            raise ValueError(f"{n!r} does not run at world size {gpus}: {skipped[n]}")
    if only:
        return [n for n in names if n in only], {}
    if quick:
        return [n for n in names if n in QUICK], {}
    return names, skipped


def main() -> None:
    p = parser()
    args = p.parse_args()
    wrong = world_mismatch(args.gpus, args.record)
    if wrong:
        p.error(wrong)
    gpus = args.gpus or NPROC
    try:
        names, skipped = plan(gpus, args.quick, args.only)
    except ValueError as e:
        p.error(str(e))
    command = (
        "python -m helpers.record.ch07 --record"
        + (" --quick" if args.quick else "")
        + (" --only " + " ".join(shlex.quote(n) for n in args.only) if args.only else "")
        + (f" --gpus {gpus}" if gpus != NPROC else "")
        + (f" --budget_s {args.budget_s:g}" if args.budget_s is not None else "")
    )
    name = "ch07_memory_quick" if args.quick else "ch07_memory"
    earlier = (
        results_earlier(name) if args.only and args.record else None
    )  # --only re-runs some layouts
    start = time.monotonic()
    deadline = start + args.budget_s if args.budget_s is not None else float("inf")
    records, path = [], None
    print(
        f"[ch07] {len(names)} layouts at world size {gpus}"
        + (
            f", budget {args.budget_s:g} s (about {len(within(names, args.budget_s))} of them)"
            if args.budget_s is not None
            else ""
        )
        + "".join(f"\n[ch07] not run: {n}: {why}" for n, why in skipped.items()),
        flush=True,
    )

    def saved() -> Path:  # a layout not run this time never replaces one recorded earlier
        runs = merge_runs(earlier, records, replaces=lambda new, old: "not_run" not in new)
        return save(name, _with_not_run(runs, skipped, gpus), command, args.copy_to)

    for i, layout_name in enumerate(names, 1):
        left = deadline - time.monotonic()
        layout = layout_named(layout_name, gpus)
        if left < MIN_LEFT_S:
            reason = "skipped: the recording's budget was spent"
            records.append(
                {
                    "name": layout_name,
                    "args": layout.to_args(),
                    "world": gpus,
                    "not_run": reason,
                    "error": reason,
                }
            )
            print(f"[{i}/{len(names)}] {layout_name}: not run: {reason}", flush=True)
            continue
        print(
            f"[{i}/{len(names)}] {layout_name} on {gpus} GPU(s)"
            + (f", {left:.0f} s of the budget left" if args.budget_s is not None else "")
            + " ...",
            flush=True,
        )
        # the first run may JIT-compile HybridAdam's CUDA and CPU kernels (minutes on a fresh box)
        with heartbeat(layout_name):
            records.append(
                run_layout(layout, timeout_s=min(480 if i == 1 else 180, left), show="none")
            )
        print(
            f"[{i}/{len(names)}] {table_rows(records[-1:])[0]} ({records[-1]['seconds']} s)",
            flush=True,
        )
        if args.record:  # saved after every layout: a recording cut short keeps what it measured
            path = saved()
    if args.record and path is not None:  # once more, with the layouts the budget left out
        path = saved()
    rows = table_rows(records)
    if rows:
        print(format_table(rows, list(dict.fromkeys(k for r in rows for k in r))))
    if args.record:
        print(
            f"[ch07] wrote {path}" if path else "[ch07] nothing ran: no record written", flush=True
        )
    print(f"[ch07] done in {time.monotonic() - start:.0f} s", flush=True)


def _with_not_run(runs: list[dict], skipped: dict[str, str], world: int) -> list[dict]:
    """The runs, then a not-run entry for each layout that cannot run at this world size."""
    have = {r["name"] for r in runs}
    extra = [
        {"name": n, "world": world, "not_run": why, "error": why}
        for n, why in skipped.items()
        if n not in have
    ]
    return runs + extra


if __name__ == "__main__":
    main()
