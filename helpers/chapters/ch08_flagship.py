"""Chapter 8's flagship records as the book shows them: tables, the tuning steps, the head-to-head.

Reads what :mod:`helpers.record.flagship` recorded (``flagship.json``: the run list, one knob per row;
``flagship_h2h.json``: the best runs alternated in rounds) and recomputes every number from the
ranks' results with :func:`helpers.record.flagship.summarize`; nothing here is typed in. :func:`world_rows`
puts the one-GPU record (results/1x…/flagship.json, ``--gpus 1``) beside the 2-GPU runs.
"""

from __future__ import annotations

from helpers.record.flagship import NPROC, ONE_GPU_COMMAND, WORLD1_RUNS, compare, summarize
from helpers.record.results import box_label

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


def recorded(name: str = "flagship", gpus: int = NPROC) -> dict | None:
    """The recorded run list (``flagship``) or head-to-head (``flagship_h2h``) made on ``gpus`` GPUs
    (default 2, the book's; 1: the one-GPU record), else None."""
    from helpers.record.results import find

    return find(name, gpus=gpus)


def setup(row: dict) -> str:
    """What a run ran, in a few words: 'LowLevelZero ZeRO-2 · compiled · adamw_fused · buckets 128 M · mbs 8'."""
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


def table_rows(record: dict) -> list[dict]:
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


def kernel_rows(record: dict) -> list[dict]:
    """Rank 0's profiled device time per step by kind of kernel (helpers.train.profiling.kernel_classes), per run.

    ``compute ms`` sums every class but communication; ``step − compute ms`` is the timed step less
    that: the time rank 0's GPU computed nothing (exposed communication, or waiting for the host)."""
    rows = []
    for run in record["runs"]:
        s = summarize(run["name"], run)
        if s["ok"] and s.get("kernels"):
            ms = s["kernels"]["ms"]
            compute = sum(v for c, v in ms.items() if c != "communication")
            row = {
                "name": s["name"],
                "timed step ms": round(1000 * s["seconds_per_step"], 1),
                "compute ms": round(compute, 1),
                "step − compute ms": round(1000 * s["seconds_per_step"] - compute, 1),
            }
            rows.append({**row, **{f"{c} ms": v for c, v in ms.items()}})
    return rows


def columns(rows: list[dict]) -> list[str]:
    """Every key of a list of rows, in first-seen order (kernel tables differ in their classes)."""
    return list(dict.fromkeys(k for r in rows for k in r))


def figure(record: dict, target: float = 0.5):
    """MFU per run (book's count, bars; PaLM's count with every parameter, dots), FSDP2 grey,
    Colossal-AI blue; the target line."""
    import matplotlib.pyplot as plt

    rows = [summarize(r["name"], r) for r in record["runs"]]
    rows = [r for r in rows if r["ok"]]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
    y = list(range(len(rows)))[::-1]
    colors = ["#999999" if r["framework"] == "fsdp2" else "#1f77b4" for r in rows]
    ax.barh(y, [100 * r["mfu"] for r in rows], color=colors, hatch=None)
    ax.scatter(
        [100 * r["mfu_all_params"] for r in rows],
        y,
        color="black",
        s=12,
        zorder=3,
        label="N = all parameters",
    )
    for yi, r in zip(y, rows):
        if not r["loss_ok"]:
            ax.text(1, yi, "loss off the reference", va="center", color="red")
    ax.axvline(100 * target, color="red", ls="--", lw=1, label=f"{100 * target:.0f} % target")
    ax.set_yticks(y, [r["name"] for r in rows])
    ax.set_xlabel("MFU % (bars: the book's count, N without the input embedding)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


STEPS = {  # run -> the run it changes one knob of (the tuning story's previous step)
    "+ reduce buckets 12 → 128 M elements": "LowLevelZero ZeRO-2, eager",
    "+ torch.compile per layer": "+ reduce buckets 12 → 128 M elements",
    "+ fused torch AdamW instead of HybridAdam": "+ torch.compile per layer",
    "+ micro-batch 8 → 16": "+ fused torch AdamW instead of HybridAdam",
    "+ overlap the parameter all-gather": "+ micro-batch 8 → 16",
    "+ gradient norm kept on the GPU (no host sync in step)": "+ overlap the parameter all-gather",
    "ZeRO-2 → ZeRO-1 (all-reduce, no gradient shards)": "+ micro-batch 8 → 16",
    "FSDP2 + torch.compile per layer": "FSDP2, eager",
    "FSDP2 + torch.compile + fused AdamW": "FSDP2 + torch.compile per layer",
    "FSDP2 + torch.compile, micro-batch 16": "FSDP2 + torch.compile + fused AdamW",
}


def _speeds(record: dict) -> dict[str, dict]:
    """name -> {tokens/s per GPU, MFU} of each valid run; a head-to-head's runs by their medians."""
    rows = [summarize(r["name"], r) for r in record["runs"]]
    if any(r["name"] != r["name"].split(" · round ")[0] for r in rows):
        return {
            g["name"]: {
                "tps": g["median"],
                "mfu": g["mfu_median"],
                "record": "head-to-head (median)",
            }
            for g in compare(rows)
            if g["valid"]
        }
    return {
        r["name"]: {"tps": r["tokens_per_s_per_gpu"], "mfu": r["mfu"], "record": "run list"}
        for r in rows
        if r["ok"] and r["loss_ok"]
    }


def step_rows(*records: dict) -> list[dict]:
    """Each tuning step's measured effect: MFU before and after and the throughput ratio.

    A step is computed only where the run and the run it changes are in the same record (measured
    minutes apart on the same machine); across records the row says why it is missing."""
    per_record = [_speeds(r) for r in records]
    rows = []
    for run, before in STEPS.items():
        same = next((s for s in per_record if run in s and before in s), None)
        if same is None:
            if any(run in s for s in per_record):
                rows.append(
                    {
                        "step": run,
                        "from": before,
                        "MFU % before": "—",
                        "MFU % after": "—",
                        "throughput ×": "not in one record",
                    }
                )
            continue
        a, b = same[before], same[run]
        rows.append(
            {
                "step": run,
                "from": before,
                "MFU % before": f"{100 * a['mfu']:.1f}",
                "MFU % after": f"{100 * b['mfu']:.1f}",
                "throughput ×": f"{b['tps'] / a['tps']:.3f}",
                "record": b["record"],
            }
        )
    return rows


H2H_COLUMNS = [
    "name",
    "rounds",
    "tokens/s/GPU per round",
    "median",
    "MFU % (median)",
    "MFU % all params (median)",
    "spread %",
    "vs FSDP2",
    "losses ok",
]


def h2h_rows(record: dict) -> list[dict]:
    """The head-to-head as a table: every round's tokens/s per GPU, the median and its ratio to FSDP2's."""
    groups = compare([summarize(r["name"], r) for r in record["runs"]])
    return [
        {
            "name": g["name"],
            "rounds": g["rounds"],
            "tokens/s/GPU per round": ", ".join(f"{t:,}" for t in g["tokens_per_s_per_gpu"]),
            "median": f"{g['median']:,.0f}",
            "MFU % (median)": f"{100 * g['mfu_median']:.1f}",
            "MFU % all params (median)": f"{100 * g['mfu_all_params_median']:.1f}",
            "spread %": f"{100 * g['spread']:.2f}",
            "vs FSDP2": f"{g['vs_fsdp2']:.4f}" if g["vs_fsdp2"] else "—",
            "losses ok": "yes" if g["valid"] else "NO",
        }
        for g in groups
        if g["median"]
    ]


def h2h_figure(record: dict):
    """Each round's throughput as a dot, the median as a bar tick; FSDP2's median as a grey line."""
    import matplotlib.pyplot as plt

    groups = [g for g in compare([summarize(r["name"], r) for r in record["runs"]]) if g["median"]]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(groups) + 1.4))
    for y, g in enumerate(reversed(groups)):
        color = "#999999" if g["framework"] == "fsdp2" else "#1f77b4"
        ax.scatter(
            g["tokens_per_s_per_gpu"],
            [y] * len(g["tokens_per_s_per_gpu"]),
            color=color,
            s=30,
            zorder=3,
        )
        ax.plot([g["median"]] * 2, [y - 0.3, y + 0.3], color=color, lw=3)
        if g["framework"] == "fsdp2":
            ax.axvline(g["median"], color="#999999", ls="--", lw=1, label="FSDP2's median")
    ax.set_yticks(range(len(groups)), [g["name"] for g in reversed(groups)])
    ax.set_xlabel("tokens/s per GPU (dots: rounds; tick: median)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig


WORLD_COLUMNS = [
    "run",
    "box",
    "setup",
    "tokens/s/GPU",
    "MFU %",
    "peak GiB",
    "loss after n steps",
    "max |Δ ref|",
    "loss ok",
    "1 GPU / 2 GPUs (tokens/s per GPU)",
    "source",
]


def _side(s: dict | None, box: str, source: str) -> dict:
    if s is None:
        return {"box": box, "tokens/s/GPU": "—", "source": source}
    if not s["ok"]:
        return {
            "box": box,
            "setup": "",
            "tokens/s/GPU": "failed",
            "loss ok": s["error"].strip().splitlines()[-1][:80],
            "source": source,
        }
    return {
        "box": box,
        "setup": setup(s),
        "tokens/s/GPU": f"{s['tokens_per_s_per_gpu']:,}",
        "MFU %": f"{100 * s['mfu']:.1f}",
        "peak GiB": s["peak_gib"],
        "loss after n steps": s["loss_last"],
        "max |Δ ref|": s["max_ref_gap"],
        "loss ok": "yes" if s["loss_ok"] else "NO",
        "source": source,
    }


def _h2h_median(h2h: dict | None, name: str) -> dict | None:
    """A head-to-head run as one summary row: its first valid round's fields with the medians' speed."""
    if h2h is None:
        return None
    rounds = [summarize(r["name"], r) for r in h2h["runs"]]
    group = next((g for g in compare(rounds) if g["name"] == name and g["median"]), None)
    if group is None:
        return None
    first = next(r for r in rounds if r["name"].split(" · round ")[0] == name and r["ok"])
    return {
        **first,
        "name": name,
        "tokens_per_s_per_gpu": round(group["median"]),
        "mfu": group["mfu_median"],
        "loss_ok": group["valid"],
        "rounds": group["rounds"],
    }


def world_rows(
    one: dict | None = None, two: dict | None = None, h2h: dict | None = None
) -> list[dict]:
    """The one-GPU flagship runs beside the 2-GPU runs they repeat (:data:`helpers.record.flagship.WORLD1_RUNS`):
    two rows per run, 2×H200 then 1×H200 (tokens/s per GPU, MFU, peak, loss against the reference),
    the second with its throughput per GPU over the 2-GPU one's. The 2-GPU side comes from the run
    list (``two``, default results/2x…/flagship.json) or, for a run only the head-to-head has, from
    its median over the rounds (``h2h``). Without a one-GPU record its row says "not recorded yet
    on 1×H200" and gives the command."""
    one = one if one is not None else recorded("flagship", gpus=1)
    two = two if two is not None else recorded("flagship", gpus=2)
    h2h = h2h if h2h is not None else recorded("flagship_h2h", gpus=2)
    box1, box2 = box_label(one, 1), box_label(two or h2h, 2)
    ones = {r["name"]: summarize(r["name"], r) for r in (one or {}).get("runs", [])}
    twos = {r["name"]: summarize(r["name"], r) for r in (two or {}).get("runs", [])}
    rows = []
    for name, _, beside in WORLD1_RUNS:
        s2, source2 = twos.get(beside), "run list"
        if s2 is None or not s2["ok"]:
            median = _h2h_median(h2h, beside)
            if median is not None:
                s2, source2 = median, f"head-to-head, median of {median['rounds']} rounds"
        row2 = {"run": beside, **_side(s2, box2, source2 if s2 else "not in the 2-GPU records")}
        if one is None:
            row1 = {
                "run": name,
                "box": box1,
                "tokens/s/GPU": f"not recorded yet on {box1}",
                "source": f"record it with: {ONE_GPU_COMMAND}",
            }
        else:
            s1 = ones.get(name)
            row1 = {
                "run": name,
                **_side(s1, box1, "run list" if s1 else f"not in the {box1} record"),
            }
            if s1 and s1["ok"] and s2 and s2["ok"]:
                row1["1 GPU / 2 GPUs (tokens/s per GPU)"] = (
                    f"{s1['tokens_per_s_per_gpu'] / s2['tokens_per_s_per_gpu']:.3f}"
                )
        rows += [row2, row1]
    return rows


def one_gpu_status(one: dict | None = None) -> str:
    """The one-GPU record's provenance, or that it is not recorded yet and the command that makes it."""
    from helpers.record.results import describe

    one = one if one is not None else recorded("flagship", gpus=1)
    if one is None:
        return f"flagship: not recorded yet on 1×H200. On a machine with one GPU: {ONE_GPU_COMMAND}"
    return describe(one)
