"""Chapter 9's tables and figures: recorded GPU runs, the from-scratch MoE load, the legacy launcher.

Used by ``notebooks/09_quick_demos.ipynb``. The GPU tables read what ``python -m
helpers.chapter09 --record`` wrote (``results/<hardware>/ch09_<part>.json``); a part not recorded
yet is reported as such, so the notebook runs before and after the GPU box has been used.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import matplotlib.pyplot as plt

from helpers.plots import DPI, RANK_COLOURS
from helpers.results import describe, load

SEED_RESNET = {  # Colossal-AI's examples/images/resnet/README.md: ResNet-18, CIFAR-10, 80 epochs
    "Single-GPU baseline, fp32": 85.85, "Booster DDP, fp32": 84.91, "Booster DDP, fp16": 85.46,
    "Booster Low Level ZeRO": 84.50, "Booster Gemini": 84.60,
}


def recorded(part: str) -> dict | None:
    """The record of one part (``ch09_<part>``); failing that, that part's runs of the quick smoke
    recording (``ch09_quick``, small models, marked ``quick``); None when neither exists."""
    for name in (f"ch09_{part}", "ch09_quick"):
        try:
            record = load(name)
        except FileNotFoundError:
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
        return (f"ch09_{part}: not recorded yet. On a box with 2 GPUs: "
                f"python -m helpers.chapter09 --record --parts {part}")
    note = "Only the quick smoke recording (small models, few steps) exists for this part.\n" if record.get("quick") else ""
    return note + describe(record)


def _first(run: dict, key: str = "losses") -> dict:
    """The result line of a run that carries ``key`` (the last pipeline stage's), else the first."""
    found = [r for r in run.get("results", []) if key in r]
    return found[0] if found else (run.get("results") or [{}])[0]


def _error(run: dict) -> str:
    lines = [x for x in run.get("error", "").strip().splitlines() if x.strip()]
    return ("failed: " + lines[-1][:120]) if lines else "failed"


def resnet_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = _first(run, "accuracy")
        rows.append({"run": run["name"], "data": r.get("data", "digits"), "epochs": r.get("epochs", ""),
                     "test accuracy": f"{100 * r['accuracy']:.2f} %" if "accuracy" in r else _error(run),
                     "images/s": r.get("images_per_s", ""), "peak MiB": r.get("peak_mib", ""),
                     "SyncBatchNorm": r.get("sync_batchnorm", "")})
    return rows


def hybrid_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = _first(run)
        if "tokens_per_s" not in r:
            rows.append({"layout": run["name"], "tokens/s": _error(run)})
            continue
        ref = r.get("reference") or []
        rows.append({"layout": run["name"], "GPUs": r["gpus"], "tokens/s": f"{r['tokens_per_s']:,}",
                     "MFU": f"{100 * r['mfu']:.1f} %", "peak GiB": f"{r['peak_mib'] / 1024:.1f}",
                     "loss first→last": f"{r['losses'][0]:.3f}→{r['losses'][-1]:.3f}",
                     f"max |Δ| vs reference ({len(ref)} steps)": f"{r['max_diff']:.1e}" if ref else "n/a"})
    return rows


def nan_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = _first(run)
        if "losses" not in r:
            rows.append({"run": run["name"], "losses": _error(run)})
            continue
        bad = [w["step"] for w in r.get("watch", []) if not (w["loss"] == w["loss"] and w["logits_finite"]
                                                             and w["grad_norm"] == w["grad_norm"])]
        watch = r.get("watch", [])
        rows.append({"run": run["name"], "loss at steps 0/5/10/last": " / ".join(
            f"{r['losses'][k]:.3g}" for k in (0, 5, 10, -1) if -len(r["losses"]) <= k < len(r["losses"])),
            "first non-finite step": bad[0] if bad else "none",
            "max |logit|": f"{max(w['logit_absmax'] for w in watch):.0f}" if watch else "",
            "non-finite gradients": ", ".join(next((w["nonfinite_grads"] for w in watch if w["nonfinite_grads"]), []))})
    return rows


def moe_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = _first(run)
        if "tokens_per_s" not in r:
            rows.append({"run": run["name"], "tokens/s": _error(run)})
            continue
        rows.append({"run": run["name"], "ep × moe_dp": f"{r['ep']} × {r['moe_dp']}", "ZeRO": r["zero"],
                     "expert params held / total": f"{r['local_expert_params'] / 1e6:.0f} M / {r['expert_params'] / 1e6:.0f} M",
                     "tokens/s": f"{r['tokens_per_s']:,}", "peak GiB": f"{r['peak_mib'] / 1024:.1f}",
                     "loss first→last": f"{r['losses'][0]:.3f}→{r['losses'][-1]:.3f}",
                     "max |Δ| vs reference": f"{r['max_diff']:.1e}"})
    return rows


def sp_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        points = [r for r in run.get("results", []) if "seq" in r]
        fits = [p["seq"] for p in points if not p["oom"]]
        oom = [p["seq"] for p in points if p["oom"]]
        rows.append({"layout": run["name"], "longest sequence that ran": f"{max(fits):,}" if fits else "none",
                     "out of memory at": f"{oom[0]:,}" if oom else ("-" if run.get("ok") else _error(run)),
                     "tokens/s at the longest": f"{max(points, key=lambda p: p['seq'] if not p['oom'] else 0).get('tokens_per_s', 0):,}" if fits else ""})
    return rows


def sp_figure(runs: list[dict]):
    """Peak memory and tokens/s against sequence length; a cross where the layout ran out of memory."""
    fig, (mem, speed) = plt.subplots(1, 2, figsize=(9, 3.2), dpi=DPI)
    for run, colour in zip(runs, RANK_COLOURS):
        points = [r for r in run.get("results", []) if "seq" in r]
        ok = [p for p in points if not p["oom"]]
        if ok:
            mem.plot([p["seq"] for p in ok], [p["peak_mib"] / 1024 for p in ok], "o-", color=colour, label=run["name"])
            speed.plot([p["seq"] for p in ok], [p["tokens_per_s"] for p in ok], "o-", color=colour, label=run["name"])
        for p in points:
            if p["oom"]:
                mem.plot([p["seq"]], [mem.get_ylim()[1] if ok else 0], "x", color=colour, ms=10, mew=2)
    for ax, label in ((mem, "peak memory per GPU (GiB)"), (speed, "tokens/s (2 GPUs)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length")
        ax.set_ylabel(label)
    mem.set_title("× = out of memory", fontsize=9)
    speed.legend(fontsize=7)
    fig.tight_layout()
    return fig


def moe_load_figure(results: list[dict]):
    """Tokens routed to each expert, stacked by the rank they came from; the line is the capacity
    of one rank's group, so a bar segment above it is partly dropped."""
    experts = results[0]["experts"]
    fig, ax = plt.subplots(figsize=(6, 2.8), dpi=DPI)
    bottom = [0] * experts
    for r, colour in zip(results, RANK_COLOURS * 4):
        ax.bar(range(experts), r["routed"], bottom=bottom, color=colour, label=f"from rank {r['rank']}")
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
    out = subprocess.run([sys.executable, "-c", _LEGACY, host, str(port)], capture_output=True, text=True,
                         timeout=timeout_s)
    lines = out.stdout.strip().splitlines()
    return lines[-1] if lines else out.stderr.strip().splitlines()[-1]
