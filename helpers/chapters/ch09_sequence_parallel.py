"""Chapter 9, "Memory and throughput against sequence length": the sequence-parallel sweep.

Used by ``notebooks/09_quick_demos.ipynb``: each layout's points (one per sequence length) with
their memory and speed (drawn by :func:`helpers.figures.ch09_sequence.sp_figure`), the allocation
a run failed on as the CUDA error states it, and the size of the attention scores
(:func:`sp_oom_rows`, :func:`kept_scores_gib`).
"""

from __future__ import annotations

import re

from helpers.chapters.ch09_records import failure_line


def sweep_points(run: dict) -> list[dict]:
    """The result lines of a run's sweep, one per sequence length it tried."""
    return [r for r in run.get("results", []) if "seq" in r]


def sp_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        points = sweep_points(run)
        fits = [p for p in points if not p["oom"]]
        oom = [p["seq"] for p in points if p["oom"]]
        rows.append(
            {
                "layout": run["name"],
                "longest sequence that ran": f"{fits[-1]['seq']:,}" if fits else "none",
                "out of memory at": f"{oom[0]:,}"
                if oom
                else ("-" if run.get("ok") else failure_line(run)),
                "tokens/s at the longest": f"{fits[-1]['tokens_per_s']:,}" if fits else "",
            }
        )
    return rows


def oom_request_gib(point: dict) -> float | None:
    """The allocation that failed, read from the recorded CUDA error ("Tried to allocate 8.00
    GiB")."""
    found = re.search(r"Tried to allocate ([\d.]+) GiB", point.get("error", ""))
    return float(found.group(1)) if found else None


def gpu_capacity_gib(runs: list[dict]) -> float | None:
    """The GPU's capacity as the recorded CUDA error states it ("total capacity of 139.80 GiB")."""
    for run in runs:
        for p in sweep_points(run):
            found = re.search(r"total capacity of ([\d.]+) GiB", p.get("error", ""))
            if found:
                return float(found.group(1))
    return None


def sp_point_rows(runs: list[dict]) -> list[dict]:
    """One row per sequence length: each layout's peak memory and tokens/s, or the failed
    allocation."""
    seqs = sorted({p["seq"] for run in runs for p in sweep_points(run)})
    rows = []
    for seq in seqs:
        row = {"sequence": f"{seq:,}"}
        for run in runs:
            p = next((p for p in sweep_points(run) if p["seq"] == seq), None)
            row[run["name"]] = (
                ""
                if p is None
                else f"OOM: {oom_request_gib(p):.0f} GiB asked, {p['peak_mib'] / 1024:.1f} GiB held"
                if p["oom"]
                else f"{p['peak_mib'] / 1024:.1f} GiB, {p['tokens_per_s']:,} tokens/s"
            )
        rows.append(row)
    return rows


def sweeps(runs: list[dict]) -> list[dict]:
    """Per layout, what :func:`helpers.figures.ch09_sequence.sp_figure` draws: its name and its
    :func:`sweep_points`."""
    return [{"name": run["name"], "points": sweep_points(run)} for run in runs]


def attention_scores_gib(
    seq: int, heads_per_gpu: int, bytes_per_element: int = 4, batch: int = 1
) -> float:
    """Size of one layer's attention scores on one GPU, batch × heads × seq × seq elements, in GiB
    (eager attention; the softmax is taken in fp32, 4 bytes, then cast to bf16, 2 bytes)."""
    return batch * heads_per_gpu * seq * seq * bytes_per_element / 2**30


def sp_oom_rows(runs: list[dict]) -> list[dict]:
    """One row per point of the sweep that ran out of memory: its layout and sequence length, the
    heads each GPU holds (the preset's heads over tp × sp), one layer's fp32 attention scores of
    those heads (:func:`attention_scores_gib`) and the allocation that failed
    (:func:`oom_request_gib`)."""
    from helpers.train.presets import PRESETS

    rows = []
    for run in runs:
        for p in (p for p in sweep_points(run) if p["oom"]):
            heads = PRESETS[p["preset"]]["heads"] // (p["tp"] * p["sp"])
            scores = attention_scores_gib(p["seq"], heads)
            rows.append(
                {
                    "layout": run["name"],
                    "sequence": f"{p['seq']:,}",
                    "heads per GPU": heads,
                    "fp32 scores, 1 layer (GiB)": f"{scores:.2f}",
                    "allocation that failed (GiB)": f"{oom_request_gib(p):.2f}",
                }
            )
    return rows


def kept_scores_gib(seq: int, heads_per_gpu: int = 8, preset: str = "half") -> float:
    """What eager attention keeps for the backward pass on one GPU at sequence ``seq``, in GiB:
    the fp32 softmax and its bf16 copy (4 + 2 bytes per score) of ``heads_per_gpu`` heads in
    every layer of the preset."""
    from helpers.train.presets import PRESETS

    return PRESETS[preset]["layers"] * attention_scores_gib(seq, heads_per_gpu, 4 + 2)
