"""Chapter 9's tables and figures: recorded GPU runs, the from-scratch MoE load, the legacy launcher.

Used by ``notebooks/09_quick_demos.ipynb``. The GPU tables read what ``python -m
helpers.record.ch09 --record`` wrote (``results/<hardware>/ch09_<part>.json``); a part not recorded
yet is reported as such, so the notebook runs before and after the GPU box has been used.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import matplotlib.pyplot as plt

from helpers.record.ch09 import ONE_GPU_COMMAND as RESNET_ONE_GPU_COMMAND
from helpers.notebook.plots import DPI, RANK_COLOURS
from helpers.record.results import box_label, describe, find

SEED_RESNET = {  # Colossal-AI's examples/images/resnet/README.md: ResNet-18, CIFAR-10, 80 epochs
    "Single-GPU baseline, fp32": 85.85,
    "Booster DDP, fp32": 84.91,
    "Booster DDP, fp16": 85.46,
    "Booster Low Level ZeRO": 84.50,
    "Booster Gemini": 84.60,
}


def recorded(part: str, gpus: int = 2) -> dict | None:
    """The record of one part (``ch09_<part>``) made on ``gpus`` GPUs (default 2, the chapter's; 1:
    the one-GPU record of ``--gpus 1``); failing that, that part's runs of the quick smoke recording
    (``ch09_quick``, small models, marked ``quick``); None when neither exists."""
    for name in (f"ch09_{part}", "ch09_quick"):
        record = find(name, gpus=gpus)
        if record is None:
            continue
        if name == "ch09_quick":
            runs = [r for r in record["runs"] if r.get("part") == part]
            if not runs:
                continue
            record = {**record, "runs": runs, "quick": True}
        return record
    return None


def provenance(part: str) -> str:
    record = recorded(part)
    if record is None:
        return (
            f"ch09_{part}: not recorded yet. On a box with 2 GPUs: "
            f"python -m helpers.record.ch09 --record --parts {part}"
        )
    note = (
        "Only the quick smoke recording (small models, few steps) exists for this part.\n"
        if record.get("quick")
        else ""
    )
    return note + describe(record)


def _first(run: dict, key: str = "losses") -> dict:
    """The result line of a run that carries ``key`` (the last pipeline stage's), else the first."""
    found = [r for r in run.get("results", []) if key in r]
    return found[0] if found else (run.get("results") or [{}])[0]


def _error(run: dict) -> str:
    lines = [x for x in run.get("error", "").strip().splitlines() if x.strip()]
    return ("failed: " + lines[-1][:120]) if lines else "failed"


def seed_reference(result: dict) -> float | None:
    """Colossal-AI's CIFAR-10 accuracy (80 epochs) for the same plugin and GPU count, if it has one."""
    if result.get("world_size") == 1:
        return SEED_RESNET["Single-GPU baseline, fp32"]
    return {
        "torch_ddp": SEED_RESNET["Booster DDP, fp32"],
        "torch_ddp_fp16": SEED_RESNET["Booster DDP, fp16"],
        "low_level_zero": SEED_RESNET["Booster Low Level ZeRO"],
        "gemini": SEED_RESNET["Booster Gemini"],
    }.get(result.get("plugin"))


def resnet_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = _first(run, "accuracy")
        seed = seed_reference(r)
        rows.append(
            {
                "run": run["name"],
                "data": r.get("data", "digits"),
                "epochs": r.get("epochs", ""),
                "test accuracy": f"{100 * r['accuracy']:.2f} %"
                if "accuracy" in r
                else "not run: " + run["not_run"]
                if run.get("not_run")
                else _error(run),
                "images/s": r.get("images_per_s", ""),
                "peak MiB": r.get("peak_mib", ""),
                "SyncBatchNorm": r.get("sync_batchnorm", ""),
                "Colossal-AI, CIFAR-10, 80 epochs (reference only)": f"{seed:.2f} %"
                if seed
                else "",
            }
        )
    return rows


def resnet_world_rows(one: dict | None = None, two: dict | None = None) -> list[dict]:
    """The ResNet runs of the 2-GPU box beside the one-GPU box's (``--gpus 1``): per run, each box's
    test accuracy, images/s and peak memory. The 2-process runs are "not run: needs 2 GPUs" in the
    one-GPU record; without a one-GPU record each row says "not recorded yet on 1×H200" and the
    command. ``one``/``two``: records (default: results/1x…/ and 2x…/ch09_resnet.json)."""
    one = one if one is not None else recorded("resnet", gpus=1)
    two = two if two is not None else recorded("resnet", gpus=2)
    sides = [(two, box_label(two, 2)), (one, box_label(one, 1))]
    names = list(
        dict.fromkeys(r["name"] for record, _ in sides for r in (record or {}).get("runs", []))
    )
    rows = []
    for name in names:
        row = {"run": name}
        for record, box in sides:
            run = next((r for r in (record or {}).get("runs", []) if r["name"] == name), None)
            r = _first(run, "accuracy") if run else {}
            if record is None:
                cell = f"not recorded yet on {box}"
            elif run is None:
                cell = f"not in the {box} record"
            elif "accuracy" in r:
                cell = f"{100 * r['accuracy']:.2f} %"
            else:
                cell = run_status(run)
            row[f"{box} test accuracy"] = cell
            row[f"{box} images/s"] = r.get("images_per_s", "—") if run else "—"
            row[f"{box} peak MiB"] = r.get("peak_mib", "—") if run else "—"
            row[f"{box} epochs"] = r.get("epochs", "—") if run else "—"
        row["note"] = f"record it with: {RESNET_ONE_GPU_COMMAND}" if one is None else ""
        rows.append(row)
    return rows


def resnet_one_gpu_status(one: dict | None = None) -> str:
    """The one-GPU ResNet record's provenance, or that it is not recorded yet and the command."""
    one = one if one is not None else recorded("resnet", gpus=1)
    if one is None:
        return f"ch09_resnet: not recorded yet on 1×H200. On a machine with one GPU: {RESNET_ONE_GPU_COMMAND}"
    return (
        "Only the quick smoke recording exists on one GPU.\n" if one.get("quick") else ""
    ) + describe(one)


def mfu_of(result: dict) -> float:
    """MFU recomputed with the book's definition (``helpers.demos.ch09_hybrid.mfu``, i.e.
    ``helpers.cost.mfu``) from the recorded tokens/s, GPU count, preset and length; the recorded ``mfu``
    (rounded to 4 digits) where the result does not name its preset."""
    if "preset" not in result or "seq" not in result:
        return result["mfu"]
    from helpers.demos.ch09_hybrid import PRESETS, mfu
    from helpers.models.llama import llama_config

    config = llama_config(**PRESETS[result["preset"]], max_seq=result["seq"])
    return mfu(config, result["seq"], result["tokens_per_s"], result["gpus"])


def slowest(run: dict) -> dict:
    """The result line of the rank with the fewest tokens/s: a step ends when every rank's does."""
    return min(
        (r for r in run.get("results", []) if "tokens_per_s" in r), key=lambda r: r["tokens_per_s"]
    )


def peak_gib(run: dict) -> float:
    """The largest peak memory of any rank of a run (pipeline stages differ), in GiB."""
    return max(r["peak_mib"] for r in run.get("results", []) if "peak_mib" in r) / 1024


def hybrid_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = _first(run)
        if "tokens_per_s" not in r:
            rows.append({"layout": run["name"], "tokens/s": _error(run)})
            continue
        ref, speed = r.get("reference") or [], slowest(run)
        rows.append(
            {
                "layout": run["name"],
                "GPUs": r["gpus"],
                "tokens/s (slowest rank)": f"{speed['tokens_per_s']:,}",
                "MFU": f"{100 * mfu_of(speed):.1f} %",
                "peak GiB (largest rank)": f"{peak_gib(run):.1f}",
                "loss first→last": f"{r['losses'][0]:.3f}→{r['losses'][-1]:.3f}",
                f"max |Δ| vs reference ({len(ref)} steps)": f"{r['max_diff']:.1e}"
                if ref
                else "n/a",
            }
        )
    return rows


def hybrid_figure(runs: list[dict]):
    """Tokens/s and MFU of each layout, as bars; one GPU in grey."""
    done = [(run["name"], slowest(run)) for run in runs if "tokens_per_s" in _first(run)]
    fig, (speed, util) = plt.subplots(
        1, 2, figsize=(9, 0.45 * len(done) + 1.2), dpi=DPI, sharey=True
    )
    colours = ["#8C8C8C" if r["gpus"] == 1 else RANK_COLOURS[0] for _, r in done]
    y = list(range(len(done)))[::-1]
    for ax, values, label, fmt in (
        (speed, [r["tokens_per_s"] for _, r in done], "tokens/s (all GPUs)", "{:,.0f}"),
        (util, [100 * mfu_of(r) for _, r in done], "MFU (%)", "{:.1f} %"),
    ):
        ax.barh(y, values, color=colours)
        for k, v in zip(y, values):
            ax.text(v, k, " " + fmt.format(v), va="center", fontsize=7)
        ax.set_xlim(0, 1.3 * max(values))
        ax.set_xlabel(label)
    speed.xaxis.set_major_formatter(lambda v, _: f"{v / 1000:.0f}k")
    speed.set_yticks(y, [name for name, _ in done], fontsize=8)
    fig.tight_layout()
    return fig


def _complete(run: dict) -> bool:
    """Every rank of the run printed a result with all its steps' losses."""
    res = [r for r in run.get("results", []) if "losses" in r]
    return (
        bool(res)
        and len(res) == run.get("gpus", len(res))
        and all(len(r["losses"]) == r.get("steps", len(r["losses"])) for r in res)
    )


def run_status(run: dict) -> str:
    """What the record says of a run, plainly: 'ok'; 'not run: <reason>' for a run the recorder skipped;
    for a run whose launch failed after every rank had reported all its steps, that it did, and what the
    stored error text holds (the launcher's message is stored cut to its last 3,000 characters, which
    may hold only the end of a rank's RESULT line); otherwise 'failed: <last line of the error>'."""
    if run.get("ok"):
        return "ok"
    error = (run.get("error") or "").strip()
    if run.get("not_run"):
        return "not run: " + run["not_run"].removeprefix("skipped: ")
    if not run.get("results") and error.startswith("skipped: "):
        return "not run: " + error.removeprefix("skipped: ")
    if _complete(run) and run.get("failure"):  # recorded since the recorder keeps the cause
        cause = (
            f"the launch was killed at its {run['timeout_s']:g} s timeout"
            if run["failure"] == "timeout"
            else f"rank {run.get('failed_rank')} exited with code {run.get('returncode')}"
        )
        return f"not ok: every rank reported all {len(_first(run)['losses'])} steps, then {cause}"
    if _complete(run):
        last = error.splitlines()[-1] if error else ""
        result_tail = "Traceback" not in error and last.endswith("}") and '"steps":' in last
        held = (
            "the end of a rank's RESULT line, no traceback"
            if result_tail
            else "failed: " + last[:120]
        )
        steps = _first(run)["losses"]
        return (
            f"not ok: every rank reported all {len(steps)} steps, then the launch did not end cleanly "
            f"(stored error text: {held})"
        )
    return _error(run)


def nan_rows(runs: list[dict]) -> list[dict]:
    """One row per run of a NaN study (parts ``nan`` and ``nan2048``): its status (:func:`run_status`),
    the loss at a few steps, the first step with a non-finite loss, logit or gradient, the largest
    logit. A run that reported its steps is shown with them whatever its status."""
    rows = []
    for run in runs:
        r = _first(run)
        if "losses" not in r:
            rows.append({"run": run["name"], "status": run_status(run)})
            continue
        bad = [
            w["step"]
            for w in r.get("watch", [])
            if not (
                w["loss"] == w["loss"] and w["logits_finite"] and w["grad_norm"] == w["grad_norm"]
            )
        ]
        watch = r.get("watch", [])
        rows.append(
            {
                "run": run["name"],
                "status": run_status(run),
                "loss at steps 0/5/10/last": " / ".join(
                    f"{r['losses'][k]:.3g}"
                    for k in (0, 5, 10, -1)
                    if -len(r["losses"]) <= k < len(r["losses"])
                ),
                "first non-finite step": bad[0] if bad else "none",
                "max |logit|": f"{max(w['logit_absmax'] for w in watch):.0f}" if watch else "",
                "non-finite gradients": ", ".join(
                    next((w["nonfinite_grads"] for w in watch if w["nonfinite_grads"]), [])
                ),
            }
        )
    return rows


def moe_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = _first(run)
        if "tokens_per_s" not in r:
            rows.append({"run": run["name"], "tokens/s": _error(run)})
            continue
        rows.append(
            {
                "run": run["name"],
                "ep × moe_dp": f"{r['ep']} × {r['moe_dp']}",
                "ZeRO": r["zero"],
                "expert params held / total": f"{r['local_expert_params'] / 1e6:.0f} M / {r['expert_params'] / 1e6:.0f} M",
                "tokens/s": f"{r['tokens_per_s']:,}",
                "peak GiB": f"{r['peak_mib'] / 1024:.1f}",
                "loss first→last": f"{r['losses'][0]:.3f}→{r['losses'][-1]:.3f}",
                "max |Δ| vs reference": f"{r['max_diff']:.1e}",
            }
        )
    return rows


def _variant(run: dict):
    """What a NaN-study run varies (tensor parallel, repeated batch, gathered logits), read from its
    recorded flags, so that the same variant keeps its colour in every panel; the name if no flags."""
    args = run.get("args")
    return (
        ("--tp" in args, "--repeat" in args, "--parallel_output" in args) if args else run["name"]
    )


def nan_figure(*studies: list[dict], titles: tuple[str, ...] = ()):
    """Loss per step of each NaN-study run on a log scale, one panel per study (the runs of part
    ``nan``, sequence 1,024, and of ``nan2048``); a variant keeps its colour and line style across
    panels, a cross marks a non-finite step, and a run that reported no losses is left out."""
    fig, axes = plt.subplots(
        1,
        len(studies),
        figsize=(7 if len(studies) == 1 else 11, 3.2),
        dpi=DPI,
        sharey=True,
        squeeze=False,
    )
    styles: dict = {}
    for ax, runs, title in zip(axes[0], studies, list(titles) + [""] * len(studies)):
        for run in runs:
            losses = _first(run).get("losses", [])
            if not losses:
                continue
            colour, style = styles.setdefault(
                _variant(run),
                (
                    RANK_COLOURS[len(styles) % len(RANK_COLOURS)],
                    ("-", "--", ":", "-.")[len(styles) % 4],
                ),
            )
            ax.plot(range(len(losses)), losses, style, color=colour, lw=1.5, label=run["name"])
            bad = [k for k, x in enumerate(losses) if x != x or x in (float("inf"), float("-inf"))]
            ax.plot(bad, [1.0] * len(bad), "x", color=colour, ms=10, mew=2)
        ax.axvline(11, color="black", ls=":", lw=1)
        ax.text(11.2, 1.0, "step of the reported NaN\n(0.95 B, seq 2048)", fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(range(0, 21, 2))
        ax.set_xlabel("step")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("loss (log scale)")
    fig.tight_layout()
    return fig


def _points(run: dict) -> list[dict]:
    return [r for r in run.get("results", []) if "seq" in r]


def sp_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        points = _points(run)
        fits = [p for p in points if not p["oom"]]
        oom = [p["seq"] for p in points if p["oom"]]
        rows.append(
            {
                "layout": run["name"],
                "longest sequence that ran": f"{fits[-1]['seq']:,}" if fits else "none",
                "out of memory at": f"{oom[0]:,}"
                if oom
                else ("-" if run.get("ok") else _error(run)),
                "tokens/s at the longest": f"{fits[-1]['tokens_per_s']:,}" if fits else "",
            }
        )
    return rows


def oom_request_gib(point: dict) -> float | None:
    """The allocation that failed, read from the recorded CUDA error ("Tried to allocate 8.00 GiB")."""
    found = re.search(r"Tried to allocate ([\d.]+) GiB", point.get("error", ""))
    return float(found.group(1)) if found else None


def gpu_capacity_gib(runs: list[dict]) -> float | None:
    """The GPU's capacity as the recorded CUDA error states it ("total capacity of 139.80 GiB")."""
    for run in runs:
        for p in _points(run):
            found = re.search(r"total capacity of ([\d.]+) GiB", p.get("error", ""))
            if found:
                return float(found.group(1))
    return None


def sp_point_rows(runs: list[dict]) -> list[dict]:
    """One row per sequence length: each layout's peak memory and tokens/s, or the failed allocation."""
    seqs = sorted({p["seq"] for run in runs for p in _points(run)})
    rows = []
    for seq in seqs:
        row = {"sequence": f"{seq:,}"}
        for run in runs:
            p = next((p for p in _points(run) if p["seq"] == seq), None)
            row[run["name"]] = (
                ""
                if p is None
                else f"OOM: {oom_request_gib(p):.0f} GiB asked, {p['peak_mib'] / 1024:.1f} GiB held"
                if p["oom"]
                else f"{p['peak_mib'] / 1024:.1f} GiB, {p['tokens_per_s']:,} tokens/s"
            )
        rows.append(row)
    return rows


def sp_figure(runs: list[dict]):
    """Peak memory and tokens/s against sequence length; a cross at the GPU's capacity where the
    layout ran out of memory."""
    fig, (mem, speed) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=DPI)
    capacity = gpu_capacity_gib(runs)
    for run, colour, shift in zip(runs, RANK_COLOURS, (1.0, 0.88, 1.12, 1.24)):
        ok = [p for p in _points(run) if not p["oom"]]
        mem.plot(
            [p["seq"] for p in ok],
            [p["peak_mib"] / 1024 for p in ok],
            "o-",
            color=colour,
            label=run["name"],
        )
        speed.plot(
            [p["seq"] for p in ok],
            [p["tokens_per_s"] for p in ok],
            "o-",
            color=colour,
            label=run["name"],
        )
        for p in _points(run):
            if p["oom"]:
                mem.plot(
                    [p["seq"] * shift],
                    [capacity or p["peak_mib"] / 1024],
                    "x",
                    color=colour,
                    ms=10,
                    mew=2,
                )
    if capacity:
        mem.axhline(capacity, color="black", ls="--", lw=1)
        mem.text(2048, capacity, f"GPU capacity {capacity:.1f} GiB", va="bottom", fontsize=7)
    for ax, label in ((mem, "peak memory per GPU (GiB)"), (speed, "tokens/s (2 GPUs)")):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
        ax.set_xlabel("sequence length")
        ax.set_ylabel(label)
    speed.yaxis.set_major_formatter(lambda v, _: f"{v / 1000:.0f}k")
    mem.set_ylim(0, 1.12 * (capacity or mem.get_ylim()[1]))
    mem.set_title("× = out of memory at that length", fontsize=9)
    speed.legend(fontsize=7)
    fig.tight_layout()
    return fig


def attention_scores_gib(
    seq: int, heads_per_gpu: int, bytes_per_element: int = 4, batch: int = 1
) -> float:
    """Size of one layer's attention scores on one GPU, batch × heads × seq × seq elements, in GiB
    (eager attention; the softmax is taken in fp32, 4 bytes, then cast to bf16, 2 bytes)."""
    return batch * heads_per_gpu * seq * seq * bytes_per_element / 2**30


def moe_load_figure(results: list[dict]):
    """Tokens routed to each expert, stacked by the rank they came from; the line is the capacity
    of one rank's group, so a bar segment above it is partly dropped."""
    experts = results[0]["experts"]
    fig, ax = plt.subplots(figsize=(6, 2.8), dpi=DPI)
    bottom = [0] * experts
    for r, colour in zip(results, RANK_COLOURS * 4):
        ax.bar(
            range(experts), r["routed"], bottom=bottom, color=colour, label=f"from rank {r['rank']}"
        )
        bottom = [b + x for b, x in zip(bottom, r["routed"])]
    ax.axhline(results[0]["capacity"], color="black", ls="--", lw=1, label="capacity per rank")
    owner = {e: r["rank"] for r in results for e in r["local_experts"]}
    ax.set_xticks(range(experts), [f"e{e}\n(rank {owner[e]})" for e in range(experts)], fontsize=7)
    ax.set_ylabel("tokens routed")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


_LEGACY = """
import sys, warnings
warnings.simplefilter("ignore")
from colossalai.legacy.initialize import launch
config = dict(parallel=dict(pipeline=1, tensor=dict(size=1, mode="sequence")))
try:
    launch(config=config, rank=0, world_size=1, host=sys.argv[1], port=int(sys.argv[2]), backend="gloo", verbose=False)
    print("initialised")
except Exception as e:
    print(f"{type(e).__name__}: {e}")
"""


def legacy_launch(host: str, timeout_s: float = 120) -> str:
    """What ``colossalai.legacy.initialize.launch`` (the legacy engine's launcher, which the seed's
    sequence-parallel tutorial uses) says when the master address is ``host``: one process, gloo."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run(
        [sys.executable, "-c", _LEGACY, host, str(port)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    lines = out.stdout.strip().splitlines()
    return lines[-1] if lines else out.stderr.strip().splitlines()[-1]
