"""Chapter 7's memory table at world size 1 beside world size 2 (Chapter 7, "One GPU beside two").

Reads the one-GPU record (results/1x<GPU>/ch07_memory.json, ``--gpus 1``) and the 2-GPU one; a
layout either box has not measured shows why, and the model's prediction for its world size all
the same (it needs no GPU).
"""

from __future__ import annotations

from helpers.record.ch07 import ONE_GPU_COMMAND, RECORD_COMMAND
from helpers.record.ch07_layouts import GIB, LAYOUTS, layout_named, not_at_world, sharding_note
from helpers.record.ch07_tables import summary
from helpers.record.results import box_label, describe, find
from helpers.cost.memory_llama import predict


def world_rows(
    one: dict | None = None, two: dict | None = None, names: list[str] | None = None
) -> list[dict]:
    """Chapter 7's memory table at world size 1 beside world size 2: per layout, each box's measured
    peak (the rank that uses most), the model's prediction for that world size and its error, and
    tokens/s per GPU. ``one``/``two``: the records (default: results/1x…/ and 2x…/ch07_memory.json).
    Without a one-GPU record its cells say "not recorded yet on 1×H200" with the command, and the
    prediction for world 1 is still shown (it needs no GPU)."""
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
                    else f"record it with: {RECORD_COMMAND}"
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


def one_gpu_status(one: dict | None = None) -> str:
    """The one-GPU record's provenance, or that it is not recorded yet and the command that makes
    it."""
    one = one if one is not None else find("ch07_memory", gpus=1)
    if one is None:
        return (
            f"ch07_memory: not recorded yet on 1×H200. On a machine with one GPU: {ONE_GPU_COMMAND}"
        )
    return describe(one)
