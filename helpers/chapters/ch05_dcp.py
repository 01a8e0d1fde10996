"""Chapter 5, "Changing the layout on resume": the runs, the numbers and the figure of the section.

Used by the notebook of Chapter 5 and by ``tests/test_ch05_dcp.py``. :func:`run_dcp` launches
:mod:`helpers.demos.ch05_dcp` twice (4 ranks save, 2 ranks load; optionally 1 rank loads);
:func:`run_deepspeed` saves with DeepSpeed, converts to the universal format and loads under
other layouts (:mod:`helpers.demos.ch05_dcp_universal`); :func:`run_colossal` is Chapter 5's
Colossal-AI ``--reshard`` on the CPU (:func:`helpers.record.ch05.reshard`, dp 2 -> dp 1).
:func:`table_rows` sets them side by side with the recorded two-GPU tp 2 -> dp 2, and
:func:`chunk_figure` draws which blocks of one weight each rank wrote and reads.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from helpers.run.launch import launch
from helpers.train import dcp_reshard as dr
from helpers.train import ds_universal as du

SAVE_AT, STEPS = 4, 8
NAMES = {
    "dp2xtp2": "FSDP2 D=2 × TP T=2 (4 ranks)",
    "fsdp2": "FSDP2 D=2 (2 ranks)",
    "tp2": "TP T=2 (2 ranks)",
    "single": "one process",
}
# the DeepSpeed cells: (name, saved as (ZeRO stage, T, ranks), loaded as (T, ranks), unconverted)
DS_CELLS = [
    ("zero1-tp2-to-dp2", (1, 2, 4), (1, 2), False),
    ("zero1-tp2-to-tp2", (1, 2, 4), (2, 2), False),
    ("zero1-tp2-raw", (1, 2, 4), (1, 2), True),
    ("zero3-dp4-to-dp2", (3, 1, 4), (1, 2), False),
]


def _args(**kw) -> list[str]:
    return [str(x) for k, v in kw.items() for x in (f"--{k}", v)]


def run_dcp(workdir: Path, single: bool = False, repeats: int = 3, timeout_s: float = 300) -> dict:
    """Save under FSDP2 × TP on 4 ranks, load as FSDP2 and as TP on 2 (and on 1 if ``single``)."""
    folder = Path(workdir) / "dcp"
    common = _args(dir=folder, steps=STEPS, save_at=SAVE_AT)
    save = launch(
        "ch05_dcp",
        4,
        ["--phase", "save", *common, "--repeats", repeats],
        timeout_s=timeout_s,
        show="none",
    )
    load = launch("ch05_dcp", 2, ["--phase", "load", *common], timeout_s=timeout_s, show="none")
    out = {"save": save.results, "load": load.results, "dir": str(folder)}
    if single:
        one = ["--phase", "load", *common, "--layouts", "single"]
        out["single"] = launch("ch05_dcp", 1, one, timeout_s=timeout_s, show="none").results
    return out


def _gap(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} losses against {len(b)}")
    return max(abs(x - y) for x, y in zip(a, b))


def dcp_gaps(run: dict) -> dict:
    """Max |resumed loss - uninterrupted loss| per loaded layout, with the two controls: AdamW's
    state left out (``weights_only``) and the first layout trained from step 0 (``scratch``, the
    drift that reduction order alone gives)."""
    ref = run["save"][0]["losses"]
    loaded = run["load"][0]
    gaps = {name: _gap(v["losses"], ref[SAVE_AT:]) for name, v in loaded["layouts"].items()}
    if "single" in run:
        gaps["single"] = _gap(run["single"][0]["layouts"]["single"]["losses"], ref[SAVE_AT:])
    return {
        "layouts": gaps,
        "weights_only": _gap(loaded["weights_only"], ref[SAVE_AT:]),
        "scratch": _gap(loaded["from_scratch"], ref),
        "async_vs_sync": max(r["async_vs_sync"] for r in run["load"]),
        "reference": ref,
        "tolerance": dr.TOLERANCE,
    }


def async_numbers(run: dict) -> dict:
    """The save timings in seconds: for each kind the median over repeats of the slowest rank
    (every rank waits for the slowest at the next collective), and the bytes staged."""

    def slowest(key: str) -> float:
        return statistics.median(
            max(r[key][i] for r in run["save"]) for i in range(len(run["save"][0][key]))
        )

    return {
        "blocking_s": slowest("blocking_s"),
        "async_return_s": slowest("async_return_s"),
        "async_complete_s": slowest("async_complete_s"),
        "overlapped_complete_s": max(r["overlapped_complete_s"] for r in run["save"]),
        "steps_while_writing": min(r["steps_while_writing"] for r in run["save"]),
        "staged_bytes": sum(r["state_bytes"] for r in run["save"]),
    }


def run_deepspeed(workdir: Path, cells=DS_CELLS, timeout_s: float = 300) -> dict:
    """Each DeepSpeed cell: one save per source layout (shared), one conversion, one load."""
    workdir, saved, out = Path(workdir), {}, {}
    for name, (zero, tp, n), (tp_to, n_to), raw in cells:
        key = f"zero{zero}-tp{tp}-n{n}"
        if key not in saved:
            src = workdir / key
            run = launch(
                "ch05_dcp_universal",
                n,
                ["--phase", "save", *_args(dir=src, tp=tp, zero=zero)],
                timeout_s=timeout_s,
                show="none",
            )
            conv = du.convert(src, workdir / f"{key}-universal")
            saved[key] = {"losses": run.first(0)["losses"], "dir": src, "convert": conv}
        src = saved[key]
        folder = src["dir"] if raw else workdir / f"{key}-universal"
        args = ["--phase", "load", *_args(dir=folder, tp=tp_to, zero=zero)] + ["--raw"] * raw
        got = launch("ch05_dcp_universal", n_to, args, timeout_s=timeout_s, show="none").first(0)
        cell = {"saved": (zero, tp, n), "loaded": (tp_to, n_to), "raw": raw}
        if "error" in got:
            cell["error"] = got["error"]
        else:
            cell["gap"] = _gap(got["losses"], src["losses"][SAVE_AT:])
        cell["params_converted"] = len(src["convert"]["params"])
        out[name] = cell
    return out


def run_colossal(workdir: Path) -> dict:
    """Chapter 5's ``--reshard`` on the CPU: a dp = 2 checkpoint resumed on one process."""
    from helpers.record.ch05 import reshard

    cfg = "helpers/demos/ch05_tiny.yaml"
    out = reshard(Path(workdir), "none", ("dp2", cfg, 2), ("dp1", cfg, 1))
    return {k: v for k, v in out.items() if k != "runs"}


def recorded_colossal() -> dict | None:
    """The two-GPU tp = 2 -> dp = 2 ``--reshard`` of Chapter 5's recording (bf16), if stored."""
    from helpers.record.ch05 import recorded

    stored = recorded()
    if stored is None:
        return None
    rs = stored["runs"][0]["reshard"]
    return {"gap": rs["max_loss_diff_vs_source"], "scratch": rs["max_loss_diff_from_scratch"]}


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.1e}"


def table_rows(gaps: dict, ds: dict, colossal: dict | None, gpu: dict | None) -> list[dict]:
    """Which format reshards which degrees: one row per run (or per reason it was not run);
    ``gaps`` is :func:`dcp_gaps`' answer, ``ds`` :func:`run_deepspeed`'s, ``colossal``
    :func:`run_colossal`'s and ``gpu`` :func:`recorded_colossal`'s."""
    rows = []
    for name, gap in gaps["layouts"].items():
        rows.append(_row("PyTorch DCP", NAMES["dp2xtp2"], NAMES[name], _fmt(gap), "CPU, gloo"))
    for cell in ds.values():
        zero, tp, n = cell["saved"]
        tp_to, n_to = cell["loaded"]
        src = f"ZeRO-{zero} D={n // tp}" + (f" × AutoTP T={tp}" if tp > 1 else "") + f" ({n} ranks)"
        dst = f"ZeRO-{zero} D={n_to // tp_to}" + (f" × AutoTP T={tp_to}" if tp_to > 1 else "")
        fmt = "DeepSpeed, unconverted" if cell["raw"] else "DeepSpeed universal"
        result = (
            cell.get("error", "").split(":")[0] + " (refused)"
            if "error" in cell
            else _fmt(cell["gap"])
        )
        rows.append(_row(fmt, src, f"{dst} ({n_to} ranks)", result, "CPU, gloo"))
    if colossal:
        rows.append(
            _row(
                "Colossal-AI sharded",
                "DDP D=2 (2 ranks)",
                "one process",
                _fmt(colossal["max_loss_diff_vs_source"]),
                "CPU, gloo",
            )
        )
    rows.append(
        _row(
            "Colossal-AI sharded",
            "TP T=2 (2 GPUs, bf16)",
            "DP D=2 (2 GPUs)",
            _fmt(gpu["gap"]) if gpu else "not recorded",
            "2 × H200, recorded",
        )
    )
    rows.append(
        _row(
            "Colossal-AI sharded",
            "TP or PP > 1",
            "any",
            "not run on the CPU",
            "needs CUDA (colossalai/accelerator/cpu_accelerator.py)",
        )
    )
    return rows


def _row(fmt: str, src: str, dst: str, result: str, where: str) -> dict:
    return {"format": fmt, "saved as": src, "loaded as": dst, "max |Δloss|": result, "run": where}


def chunk_figure(run: dict):
    """The blocks of one weight (``WEIGHT`` of the demo) that each rank wrote under FSDP2 × TP
    and that each rank reads under FSDP2 and under TP (dashed: the saved blocks' edges). DCP reads
    every overlap of a wanted block with a saved one."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from helpers.figures.style import DPI, RANK_COLOURS

    saved = run["save"][0]["saved_chunks"]
    panels = [("saved: " + NAMES["dp2xtp2"], [(c["rank"], c) for c in saved])]
    for layout in run["load"][0]["layouts"]:
        blocks = [(r["rank"], r["layouts"][layout]["chunk"]) for r in run["load"]]
        panels.append(("loaded: " + NAMES[layout], blocks))
    rows, cols = (sum(c["sizes"][i] for c in saved if c["offsets"][1 - i] == 0) for i in (0, 1))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 2.6), dpi=DPI)
    for ax, (title, blocks) in zip(axes, panels):
        for rank, c in blocks:
            (r0, c0), (h, w) = c["offsets"], c["sizes"]
            ax.add_patch(
                Rectangle(
                    (c0, r0),
                    w,
                    h,
                    facecolor=RANK_COLOURS[rank],
                    edgecolor="white",
                    lw=2,
                    alpha=0.85,
                )
            )
            k = 2 if title.startswith("saved") else 4  # off centre: clear of the dashed edges
            ax.text(c0 + w / k, r0 + h / k, f"rank {rank}", ha="center", va="center", fontsize=9)
        if not title.startswith("saved"):  # the saved blocks' edges: each rank reads 2 pieces
            for c in saved:
                (r0, c0), (h, w) = c["offsets"], c["sizes"]
                ax.add_patch(Rectangle((c0, r0), w, h, fill=False, ls="--", lw=1, ec="black"))
        ax.set_xlim(0, cols)
        ax.set_ylim(rows, 0)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(f"columns (of {cols})", fontsize=8)
        ax.set_ylabel(f"rows (of {rows})", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(run["save"][0]["weight"], fontsize=9)
    fig.tight_layout()
    return fig
