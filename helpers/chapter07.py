"""Chapter 7's GPU measurements: every layout of the memory table, run, recorded and compared.

Record on a box with two GPUs (results/<hardware>/ch07_memory.json), about 6 minutes:

    python -m helpers.chapter07 --record          # all layouts
    python -m helpers.chapter07 --record --quick  # three layouts, a smoke test (ch07_memory_quick.json)
    python -m helpers.chapter07 --record --only "TP=2 bf16"  # re-record some, keep the others

Each layout is one torchrun of ``helpers.demos.ch07_memory`` with its own timeout; a failing
layout is recorded with its error and the recording goes on.
"""

from __future__ import annotations

import argparse
import shlex
import time

from helpers.launch import LaunchError, launch, torchrun_command
from helpers.memory_layouts import TrainLayout
from helpers.results import earlier as results_earlier, format_table, load, merge_runs, save

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
TECHNIQUES = ["DDP fp32", "DDP bf16 (Hybrid tp=1)", "ZeRO-1 bf16", "ZeRO-2 bf16", "Gemini bf16 (static)",
              "ZeRO-1 bf16 + recompute", "ZeRO-2 bf16 + CPU offload", "Gemini bf16 + offload"]
GIB = 2**30


def layout_named(name: str) -> TrainLayout:
    return next(x for x in LAYOUTS if x.name == name)


def run_layout(layout: TrainLayout, timeout_s: float = 150, show: str = "rank0") -> dict:
    """One torchrun; the record keeps every rank's result or the error text."""
    args = layout.to_args()
    record = {"name": layout.name, "args": args, "command": shlex.join(torchrun_command("ch07_memory", NPROC, args))}
    start = time.monotonic()
    try:
        result = launch("ch07_memory", NPROC, args, timeout_s=timeout_s, show=show)
        record["ranks"] = result.results
    except LaunchError as error:
        record["error"] = str(error)[-3000:]
    record["seconds"] = round(time.monotonic() - start, 1)
    return record


def summary(record: dict) -> dict:
    """Measured and predicted peak of the rank that uses most (the one that decides OOM)."""
    from helpers.memory_llama import predict

    if "ranks" not in record:
        known = [x for x in LAYOUTS if x.name == record["name"]]
        return {"layout": record["name"], "error": record.get("error", "?").strip().splitlines()[-1][:120],
                "predicted": max(predict(known[0], r)["peak"] for r in range(known[0].world)) if known else None}
    layout = TrainLayout.from_dict(record["ranks"][0]["layout"])
    ranks = sorted(record["ranks"], key=lambda r: r["measured"]["peak"] if r["measured"] else 0)
    worst = ranks[-1]
    measured = worst["measured"]["peak"] if worst["measured"] else None
    predicted = predict(layout, rank=worst["rank"])["peak"]
    error = None if measured is None else 100 * (predicted - measured) / measured
    at_recording = worst.get("prediction", {}).get("peak")  # the model as it was when the run was recorded
    first_error = None if measured is None or at_recording is None else 100 * (at_recording - measured) / measured
    return {"layout": record["name"], "rank": worst["rank"], "measured": measured, "predicted": predicted,
            "error_pct": error, "error_pct_at_recording": first_error, "tokens_per_s": sum(r["tokens_per_s"] for r in record["ranks"]) / len(record["ranks"]),
            "outside_allocator": worst["measured"]["outside_allocator"] if worst["measured"] else None,
            "peak_reserved": worst["measured"]["peak_reserved"] if worst["measured"] else None}


def table_rows(records: list[dict]) -> list[dict]:
    rows = []
    for r in map(summary, records):
        if "error" in r:
            rows.append({"layout": r["layout"], "measured MiB": "failed",
                         "predicted MiB": f"{r['predicted'] / MIB:.0f}" if r["predicted"] else "",
                         "error %": "not recorded: " + r["error"][:72]})
            continue
        rows.append({"layout": r["layout"], "measured MiB": f"{r['measured'] / MIB:.0f}" if r["measured"] else "-",
                     "predicted MiB": f"{r['predicted'] / MIB:.0f}",
                     "error %": f"{r['error_pct']:+.1f}" if r["error_pct"] is not None else "-",
                     "error % at recording": (f"{r['error_pct_at_recording']:+.1f}"
                                              if r["error_pct_at_recording"] is not None else "-"),
                     "reserved MiB": f"{r['peak_reserved'] / MIB:.0f}" if r["peak_reserved"] else "-",
                     "outside allocator MiB": f"{r['outside_allocator'] / MIB:.0f}" if r["outside_allocator"] else "-",
                     "tokens/s": f"{r['tokens_per_s']:.0f}"})
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
    ax.fill_between(line, [0.9 * x for x in line], [1.1 * x for x in line], color="#dddddd", label="±10 %")
    ax.plot(line, line, color="grey", lw=1)
    for i, r in enumerate(rows, 1):
        colour = "#4C72B0" if abs(r["error_pct"]) <= 10 else "#C44E52"
        ax.scatter(r["measured"] / GIB, r["predicted"] / GIB, color=colour, zorder=3)
        ax.annotate(str(i), (r["measured"] / GIB, r["predicted"] / GIB), textcoords="offset points", xytext=(4, 3),
                    fontsize=8)
    ax.set(xlim=(0, top), ylim=(0, top), xlabel="measured max_memory_allocated (GiB)",
           ylabel="predicted peak (GiB)", title="Memory model against the GPU, per layout")
    ax.legend(loc="upper left")
    ax.text(1.02, 1.0, "\n".join(f"{i}  {r['layout']}  {r['error_pct']:+.1f} %" for i, r in enumerate(rows, 1)),
            transform=ax.transAxes, va="top", fontsize=8, family="monospace")
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
        rows.append({"layout": name, "peak GiB": f"{r['measured'] / GIB:.2f}",
                     "memory vs DDP fp32": f"{r['measured'] / base['measured']:.2f}" if base else "-",
                     "tokens/s": f"{r['tokens_per_s']:.0f}",
                     "speed vs DDP fp32": f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}" if base else "-"})
    return rows


def technique_figure(record: dict, names: list[str] = TECHNIQUES):
    """Left: the predicted peak split into its parts, the measured peak as a diamond. Right: tokens/s."""
    import matplotlib.pyplot as plt

    from helpers.memory_llama import predict

    by_name = {r["layout"]: r for r in measured_rows(record)}
    names = [n for n in names if n in by_name]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=80, sharey=True,
                                      gridspec_kw={"width_ratios": [3, 2]})
    colours = ["#4C72B0", "#8172B3", "#DD8452", "#937860", "#55A868", "#C44E52", "#8C8C8C"]
    for y, name in enumerate(names):
        r = by_name[name]
        parts = predict(layout_named(name), rank=r["rank"])["breakdown"]
        x = 0.0
        for (part, value), colour in zip(parts.items(), colours):
            left.barh(y, value / GIB, left=x, color=colour, label=part if y == 0 else None)
            x += value / GIB
        left.scatter(r["measured"] / GIB, y, marker="D", color="black", zorder=3,
                     label="measured" if y == 0 else None)
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
    from helpers.memory_llama import predict

    rows = []
    for layout in layouts:
        p = max((predict(layout, r) for r in range(layout.world)), key=lambda x: x["peak"])
        rows.append({"layout": layout.name, "rank": p["rank"], "params/rank (M)": f"{p['params'] / 1e6:.0f}",
                     "model states GiB": f"{p['persistent'] / GIB:.2f}",
                     "activations GiB": f"{(p['activations'] + p['head']) / GIB:.2f}",
                     "peak phase": p["peak_phase"], "peak GiB": f"{p['peak'] / GIB:.2f}"})
    return rows


def activation_rows(shape=None, tokens: int = 4096, seq: int = 1024) -> list[dict]:
    """Bytes per token and layer of each part, HF Llama against Korthikanti's 34·h (GPT, 16-bit)."""
    from helpers.memory_layouts import LlamaShape
    from helpers.memory_llama import layer_activation_parts

    shape = shape or LlamaShape()
    rows = []
    for label, e, attn in (("bf16, sdpa", 2, "sdpa"), ("fp32, sdpa", 4, "sdpa"), ("bf16, eager", 2, "eager")):
        parts = layer_activation_parts(shape, tokens, seq, e, attn=attn)
        row = {"precision, attention": label}
        row.update({k: f"{v / tokens / shape.hidden:.1f}·h" for k, v in parts.items()})
        row["layer total"] = f"{sum(parts.values()) / tokens / shape.hidden:.1f}·h"
        rows.append(row)
    a, s, h = shape.heads, seq, shape.hidden
    rows.append({"precision, attention": "Korthikanti (GPT, 16-bit)",
                 "layer total": f"34·h flash, {34 + 5 * a * s / h:.0f}·h with 5as/h"})
    return rows


def phase_rows(record: dict, names: list[str]) -> list[dict]:
    """Measured phase peaks (one step, allocator peak reset between phases) next to the model's."""
    from helpers.memory_llama import predict

    runs = {r["name"]: r for r in record["runs"] if "ranks" in r}
    rows = []
    for name in names:
        if name not in runs:
            continue
        rank = max(runs[name]["ranks"], key=lambda r: r["measured"]["peak"])
        phases, model = rank["phases"], predict(layout_named(name), rank["rank"])["phases"]
        model["forward_backward"] = max(model["forward"], model["backward_start"], model["backward_end"])
        model["backward"] = max(model["backward_start"], model["backward_end"])
        row = {"layout": name, "rank": rank["rank"],
               "start GiB": f"{phases['start']['allocated'] / GIB:.2f}",
               "start model": f"{predict(layout_named(name), rank['rank'])['persistent'] / GIB:.2f}"}
        for key in ("forward", "backward", "forward_backward", "step"):
            if key in phases:
                row[f"{key} GiB"] = f"{phases[key]['peak'] / GIB:.2f}"
                row[f"{key} model"] = f"{model[key] / GIB:.2f}"
        rows.append(row)
    return rows


def show_recorded() -> str:
    from helpers.results import describe

    record = load("ch07_memory")
    rows = table_rows(record["runs"])
    return describe(record) + "\n\n" + format_table(rows, list(rows[0]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="write results/<hardware>/ch07_memory.json")
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK}")
    parser.add_argument("--only", nargs="*", default=None, help="layout names to run")
    args = parser.parse_args()
    names = args.only or (QUICK if args.quick else [x.name for x in LAYOUTS])
    command = "python -m helpers.chapter07 --record" + (" --quick" if args.quick else "") + \
        (" --only " + " ".join(shlex.quote(n) for n in args.only) if args.only else "")
    name = "ch07_memory_quick" if args.quick else "ch07_memory"
    earlier = results_earlier(name) if args.only and args.record else None  # --only re-runs some layouts
    records = []
    for i, layout_name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {layout_name} ...", flush=True)
        # the first run may JIT-compile HybridAdam's CUDA and CPU kernels (minutes on a fresh box)
        records.append(run_layout(layout_named(layout_name), timeout_s=480 if i == 1 else 180, show="none"))
        print(f"[{i}/{len(names)}] {table_rows(records[-1:])[0]} ({records[-1]['seconds']} s)", flush=True)
        if args.record:  # saved after every layout: a recording cut short keeps what it measured
            path = save(name, merge_runs(earlier, records), command)
    rows = table_rows(records)
    print(format_table(rows, list(dict.fromkeys(k for r in rows for k in r))))
    if args.record:
        print("wrote", path)


if __name__ == "__main__":
    main()
