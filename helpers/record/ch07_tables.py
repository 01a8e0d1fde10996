"""Chapter 7's memory record read back: measured peaks against the memory model, per layout.

A ch07_memory record (:mod:`helpers.record.ch07`) holds one run per layout with every rank's
result; :func:`summary` takes the rank that uses most (the one that decides out-of-memory) and puts
its measured peak beside :func:`helpers.cost.memory_llama.predict`'s, and the tables of Chapter 7
("The model against the GPU", "The techniques side by side") are built from those summaries.
"""

from __future__ import annotations

from dataclasses import replace

from helpers.parallel.train_layout import CH07_SHAPE, TrainLayout
from helpers.record.ch07_layouts import GIB, LAYOUTS, MIB, NPROC, TECHNIQUES
from helpers.record.results import describe, format_table, load
from helpers.cost.memory_llama import predict, layer_activation_parts


def rank_results(run: dict) -> list[dict] | None:
    """Every rank's result of a layout that ran, else None: of a run of
    :func:`helpers.record.runner.run_one` (its ``results``) or of an earlier recording
    (``ranks``)."""
    if "ranks" in run:
        return run["ranks"]
    return run["results"] if run.get("ok") and run.get("results") else None


def summary(record: dict) -> dict:
    """Measured and predicted peak of the rank that uses most (the one that decides OOM)."""
    per_rank = rank_results(record)
    if per_rank is None:
        known = [x for x in LAYOUTS if x.name == record["name"]]
        world = record.get("world", record.get("gpus"))  # "world": an earlier recording's name
        try:  # the model at the world size the layout was to run at
            layout = replace(known[0], world=world or known[0].world) if known else None
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
    layout = TrainLayout.from_dict(per_rank[0]["layout"])
    worst = sorted(per_rank, key=lambda r: r["measured"]["peak"] if r["measured"] else 0)[-1]
    measured = worst["measured"]["peak"] if worst["measured"] else None
    predicted = predict(layout, rank=worst["rank"])["peak"]
    error = None if measured is None else 100 * (predicted - measured) / measured
    # the model as it was when the run was recorded
    at_recording = worst.get("prediction", {}).get("peak")
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
        "tokens_per_s": sum(r["tokens_per_s"] for r in per_rank) / len(per_rank),
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
        r["name"]: TrainLayout.from_dict(rank_results(r)[0]["layout"])
        for r in record["runs"]
        if rank_results(r)
    }


def predicted_rows(layouts: list[TrainLayout] = LAYOUTS) -> list[dict]:
    """The model's answer for every layout, on the rank that needs most."""
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
    shape = shape or CH07_SHAPE
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
    runs = {r["name"]: rank_results(r) for r in record["runs"] if rank_results(r)}
    rows = []
    for name in names:
        if name not in runs:
            continue
        rank = max(runs[name], key=lambda r: r["measured"]["peak"])
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
    record = load("ch07_memory", gpus=gpus)
    rows = table_rows(record["runs"])
    return describe(record) + "\n\n" + format_table(rows, list(rows[0]))


def _cause(error: str | None) -> str:
    """A failed run's cause in one line: a timeout's first sentence, else the error's last line."""
    lines = (error or "?").strip().splitlines() or ["?"]
    if (
        "ran past its" in lines[0]
    ):  # helpers.run.launch.LaunchTimeout: the rest is the ranks' last lines
        return lines[0].split(";")[0].removeprefix("helpers.demos.ch07_memory ")
    return lines[-1][:120]
