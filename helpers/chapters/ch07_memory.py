"""Chapter 7 (where the memory goes): the notebook's glue.

Section 2: the bytes autograd saves in one forward and loss of a small Hugging Face Llama, counted
by :func:`saved_bytes` and predicted term by term by :func:`activation_formula`, which the notebook
checks to the byte. Gradient accumulation on one GPU: :func:`accumulation_points` and
:func:`accumulation_rows` read the accumulation layouts of the one-GPU record
(:data:`helpers.record.ch07_layouts.ACCUMULATION`) against the memory model's held gradients.
"""

from __future__ import annotations

import torch

from helpers.models.shape import ModelShape
from helpers.cost.census import count_saved_bytes
from helpers.cost.memory_llama import head_activation_bytes, layer_activation_bytes, predict
from helpers.models.llama import build_llama

GIB = 2**30


def saved_bytes(shape: ModelShape, ids: torch.Tensor, dtype: torch.dtype, attn: str) -> int:
    """What autograd saves (weights excluded, each storage once) when a Llama of ``shape`` in
    ``dtype`` with ``attn`` attention (``sdpa`` or ``eager``) runs forward and loss on ``ids``
    (b × s tokens, their own labels): :func:`helpers.cost.census.count_saved_bytes`."""
    model = build_llama(shape.config(attn=attn), dtype=dtype)
    return count_saved_bytes(model, {"input_ids": ids, "labels": ids})["total"]


def activation_formula(shape: ModelShape, b: int, s: int, e: int, attn: str) -> float:
    """The same bytes counted from the code that saves them, for b sequences of s tokens (N = b·s)
    at e bytes per element: each decoder layer (:func:`layer_activation_bytes`), the final RMSNorm
    (:func:`head_activation_bytes`), HF's fp32 log-softmax of the logits (4·N·v), the rotary cos
    and sin (2·s·d·e for head width d), the int64 ids and labels (16·N) and the fp32 loss (4)."""
    n, head_dim = b * s, shape.hidden // shape.heads
    return (
        shape.layers * layer_activation_bytes(shape, n, s, e, attn=attn)
        + head_activation_bytes(shape, n, e)
        + 4 * n * shape.vocab
        + 2 * s * head_dim * e
        + 16 * n
        + 4
    )


def accumulation_points(record: dict | None = None) -> list[dict]:
    """Per accumulation layout (:data:`helpers.record.ch07_layouts.ACCUMULATION`, in its order) of
    the one-GPU Chapter 7 record (default: ``results.find('ch07_memory', gpus=1)``), numbers in
    GiB: ``plugin`` (the layout's name before ", accumulation"), ``m``, ``measured``
    (max_memory_allocated over the timed steps, the rank that uses most; None where the record has
    no measurement, ``status`` says why), ``predicted`` (:func:`helpers.cost.memory_llama.predict`
    today, for the layout as it ran), ``error_pct``, ``held`` (the gradients the model holds
    across micro-batches: ``states['grads']`` when m > 1, else 0), ``over_m1`` (measured minus the
    same plugin's m = 1) beside ``predicted_over_m1``, and ``over_previous`` (measured minus the
    previous m: m = 2 over m = 1, m = 4 over m = 2) beside ``predicted_over_previous``."""
    from helpers.parallel.train_layout import TrainLayout
    from helpers.record.ch07_layouts import ACCUMULATION
    from helpers.record.ch07_tables import rank_results, summary
    from helpers.record.results import find

    record = find("ch07_memory", gpus=1) if record is None else record
    runs = {r["name"]: r for r in (record or {}).get("runs", [])}
    points = []
    for layout in ACCUMULATION:
        run = runs.get(layout.name)
        ranks = rank_results(run) if run is not None else None
        s = summary(run) if ranks else None
        measured = s["measured"] / GIB if s and s["measured"] is not None else None
        if measured is not None:
            layout = TrainLayout.from_dict(ranks[0]["layout"])  # as it ran
        p = predict(layout)
        status = "measured" if measured is not None else "not recorded yet"
        if run is not None and measured is None:
            status = "not run: " + run["not_run"] if run.get("not_run") else "failed"
        points.append(
            {
                "plugin": layout.name.split(", accumulation")[0],
                "m": layout.microbatches,
                "measured": measured,
                "predicted": p["peak"] / GIB,
                "error_pct": s["error_pct"] if measured is not None else None,
                "held": (p["states"]["grads"] if layout.microbatches > 1 else 0.0) / GIB,
                "status": status,
            }
        )
    for i, x in enumerate(points):
        first = next(y for y in points if y["plugin"] == x["plugin"])
        before = points[i - 1] if x is not first else None
        for key, base in (("over_m1", first), ("over_previous", before)):
            both = base is not None and None not in (x["measured"], base["measured"])
            x[key] = x["measured"] - base["measured"] if both else None
            x[f"predicted_{key}"] = x["predicted"] - base["predicted"] if base else None
    return points


def accumulation_rows(record: dict | None = None) -> list[dict]:
    """:func:`accumulation_points` as a table: per plugin and m, the measured and predicted peak,
    the model's error, the measured increase over m = 1 beside the held gradients the model
    counts, and the increase over the previous m, measured and predicted."""

    def gib(v: float | None) -> str:
        return "—" if v is None else f"{v:.2f}"

    return [
        {
            "plugin": x["plugin"],
            "m": x["m"],
            "measured peak GiB": gib(x["measured"]) if x["measured"] is not None else x["status"],
            "predicted peak GiB": gib(x["predicted"]),
            "error %": "—" if x["error_pct"] is None else f"{x['error_pct']:+.1f}",
            "measured over m=1 GiB": gib(x["over_m1"]),
            "held grads (model) GiB": gib(x["held"]),
            "measured over previous m GiB": gib(x["over_previous"]),
            "predicted over previous m GiB": gib(x["predicted_over_previous"]),
        }
        for x in accumulation_points(record)
    ]


def accumulation_numbers(points: list[dict] | None = None) -> dict:
    """The numbers Chapter 7's page quotes about the one-GPU accumulation runs (``ch07-acc-*``
    keys): the held gradients the model counts, the measured rise from m = 1 to 2 and from 2 to 4
    (the largest over both plugins), and the worst peak error."""
    pts = [p for p in (points or accumulation_points()) if p["measured"] is not None]
    two = [p for p in pts if p["m"] == 2]
    four = [p for p in pts if p["m"] == 4]
    return {
        "ch07-acc-held-gib": round(two[0]["held"], 2),
        "ch07-acc-rise-lo-gib": round(min(p["over_previous"] for p in two), 2),
        "ch07-acc-rise-hi-gib": round(max(p["over_previous"] for p in two), 2),
        "ch07-acc-rise-4-mib": round(1024 * max(abs(p["over_previous"]) for p in four), 1),
        "ch07-acc-worst-pct": round(max(abs(p["error_pct"]) for p in pts), 1),
        "ch07-acc-runs": len(pts),
    }
