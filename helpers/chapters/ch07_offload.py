"""Chapter 7, "Offloading activations": the notebook's glue.

:func:`cpu_check` trains nothing: one forward and backward of a small Llama with and without
:class:`helpers.train.offload.ActivationOffload`, the gradients compared exactly and the bytes
sent to the host set beside the memory model's count. :func:`rows` sets each row of the one-GPU
record ``results/1x…/ch07_offload.json`` (:mod:`helpers.record.offload`) beside the memory model
(:func:`helpers.record.offload.predicted`) and the time term
(:func:`helpers.cost.memory_plan.offload_seconds`); without a record it gives the model alone, for
the micro-batches an H200 would run. :func:`numbers` are the page's glued values (keys
``ch07-offload-…``).
"""

from __future__ import annotations

import math

import torch

from helpers.cost.memory_llama import layer_activation_bytes
from helpers.cost.memory_plan import offload_seconds
from helpers.models.llama import build_llama
from helpers.models.shape import ModelShape
from helpers.record.offload import CONFIGS, SEQ, SHAPE, choose, predicted
from helpers.record.results import box_label, find
from helpers.run.result_types.ch07 import OffloadRecord, OffloadRun
from helpers.train.offload import ActivationOffload

GIB = 2**30
H200_GIB = 139.8  # the GPU memory the micro-batches are chosen for when nothing is recorded
HOST_GIB = 120.0  # and the free host memory of a 128 GiB machine
LABELS = {
    "baseline": "baseline",
    "offload": "offload",
    "save_on_cpu": "torch save_on_cpu",
    "recompute": "recompute",
    "recompute, larger micro-batch": "recompute, larger b",
    "baseline, larger micro-batch": "baseline, larger b",
    "offload, larger micro-batch": "offload, larger b",
}


def cpu_check(shape: ModelShape, b: int, s: int, dtype=torch.bfloat16) -> dict:
    """One forward and backward of a Llama of ``shape`` on b × s tokens, plain and under
    :class:`ActivationOffload` (every storage offloaded, ``min_bytes=0``): whether the loss and
    every gradient are equal exactly, the bytes sent to the host, and the model's count of them,
    (L − 1) layers plus RoPE's cos and sin seen once per offloaded layer."""
    ids = torch.randint(0, shape.vocab, (b, s), generator=torch.Generator().manual_seed(0))
    out = []
    for offload in (False, True):
        model = build_llama(shape.config(attn="sdpa"), dtype=dtype)
        off = ActivationOffload(model.model.layers, min_bytes=0) if offload else None
        with off if off else torch.enable_grad():
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        out.append((loss.detach(), [p.grad for p in model.parameters()], off))
    (loss, grads, _), (off_loss, off_grads, off) = out
    e = torch.finfo(dtype).bits // 8
    rope = 2 * s * (shape.hidden // shape.heads) * e
    per_layer = layer_activation_bytes(shape, b * s, s, e)
    return {
        "equal": bool(torch.equal(loss, off_loss))
        and all(torch.equal(a, c) for a, c in zip(grads, off_grads)),
        "offloaded": off.offloaded_bytes,
        "model": (shape.layers - 1) * (per_layer + rope),
        "layers": shape.layers,
    }


def record() -> OffloadRecord | None:
    """The one-GPU record, or None before it is made."""
    return find("ch07_offload", gpus=1)


def micro_batches(rec: OffloadRecord | None) -> dict:
    """b and B as recorded, else as :func:`helpers.record.offload.choose` picks them for an H200
    with a 128 GiB host."""
    if rec:
        return {k: rec["choice"][k] for k in ("b", "B")}
    return {k: choose(H200_GIB * GIB, HOST_GIB * GIB)[k] for k in ("b", "B")}


def bandwidths(rec: OffloadRecord) -> tuple[float, float]:
    """The measured pinned copy bandwidths (bytes/s) at the largest size: out, back."""
    bw = rec["bandwidth"]
    size = max(bw["device_to_host"], key=int)
    return bw["device_to_host"][size] * 1e9, bw["host_to_device"][size] * 1e9


def rows(rec: OffloadRecord | None) -> list[dict]:
    """One dict per row of :data:`helpers.record.offload.CONFIGS`: ``name``, ``mode``,
    ``micro_batch``, ``predicted`` (GiB, max_memory_allocated; None for torch's save_on_cpu, whose
    pack copies every saved tensor at once), ``predicted_host`` (GB per step); with a record also
    ``measured`` (GiB), ``tokens_per_s`` (median, ``lo``–``hi``), ``host`` (GB per step), ``oom``,
    ``loss_ok``, and for offload rows ``predicted_tokens_per_s`` from the time term: the baseline's
    seconds per token at b times the row's tokens, plus the copies the passes do not hide."""
    mbs, runs = micro_batches(rec), {r["name"]: r for r in (rec or {}).get("runs", [])}
    base: OffloadRun | dict = runs.get("baseline", {})
    out = []
    for name, mode, size in CONFIGS:
        b = mbs[size]
        p = predicted(mode, b) if mode != "save_on_cpu" else None
        row = {"name": name, "mode": mode, "micro_batch": b, "size": size}
        row["predicted"] = p["allocated"] / GIB if p else None
        row["predicted_host"] = p["offloaded"] / 1e9 if p else None
        run: OffloadRun | None = runs.get(name)
        if run is not None:
            ok = bool(run.get("ok"))
            row.update(oom=bool(run.get("oom")), ok=ok, loss_ok=run.get("loss_ok"))
            row["not_run"] = run.get("not_run")
            if ok:
                row.update(
                    measured=run["peak_gib"],
                    tokens_per_s=run["tokens_per_s"],
                    lo=run.get("tokens_per_s_min"),
                    hi=run.get("tokens_per_s_max"),
                    host=run["offloaded_bytes"] / 1e9,
                )
        if mode == "offload" and rec and base.get("ok"):
            step = b * SEQ / base["tokens_per_s"]  # the baseline's seconds per token, b·s tokens
            t = offload_seconds(p["offloaded"], *bandwidths(rec), step)
            row["predicted_tokens_per_s"] = b * SEQ / t["step_s"]
            row["exposed_s"], row["step_s"] = t["exposed_s"], step
        out.append(row)
    return out


def _fmt(value, digits: int = 1, none: str = "—") -> str:
    return none if value is None else f"{value:,.{digits}f}"


def table(all_rows: list[dict]) -> list[dict]:
    """The page's table: one line per row, measured beside predicted."""
    base = next((r for r in all_rows if r["name"] == "baseline"), {})
    out = []
    for r in all_rows:
        measured = r.get("measured")
        if r.get("oom"):
            measured_text = "out of memory"
        elif r.get("not_run"):
            measured_text = "not run"
        else:
            measured_text = _fmt(measured, 1, "not recorded yet")
        line = {
            "run": LABELS[r["name"]],
            "b": r["micro_batch"],
            "peak GiB, measured": measured_text,
            "peak GiB, model": _fmt(r["predicted"]),
            "to host GB/step": _fmt(r.get("host"), 1, _fmt(r["predicted_host"], 1) + " (model)"),
        }
        if r.get("tokens_per_s"):
            line["tokens/s"] = f"{r['tokens_per_s']:,} ({r['lo']:,}–{r['hi']:,})"
            if base.get("tokens_per_s"):
                line["× baseline"] = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}"
            line["loss"] = "on the reference" if r.get("loss_ok") else "off"
        out.append(line)
    return out


def numbers(all_rows: list[dict], rec: OffloadRecord | None) -> dict:
    """The page's glued values: the model's always, the measurement's when there is a record."""
    by = {r["name"]: r for r in all_rows}
    b, big = by["baseline"]["micro_batch"], by["offload, larger micro-batch"]["micro_batch"]
    out = {
        "ch07-offload-b": b,
        "ch07-offload-big-b": big,
        "ch07-offload-kept-layers": 2,
        "ch07-offload-kappa": layer_activation_bytes(SHAPE, SEQ, SEQ, 2, cuda=True)
        / SEQ
        / SHAPE.hidden,
        "ch07-offload-model-base-gib": by["baseline"]["predicted"],
        "ch07-offload-model-off-gib": by["offload"]["predicted"],
        "ch07-offload-model-rec-gib": by["recompute"]["predicted"],
        "ch07-offload-model-host-gb": by["offload"]["predicted_host"],
        "ch07-offload-model-big-base-gib": by["baseline, larger micro-batch"]["predicted"],
        "ch07-offload-model-big-off-gib": by["offload, larger micro-batch"]["predicted"],
        "ch07-offload-model-big-host-gb": by["offload, larger micro-batch"]["predicted_host"],
    }
    gpu = rec["choice"]["gpu_bytes"] if rec else H200_GIB * GIB
    out["ch07-offload-gpu-gib"] = gpu / GIB
    out["ch07-offload-model-seq-gb"] = predicted("offload", 1)["offloaded"] / 1e9
    out["ch07-offload-model-fit-b"] = _fits(gpu)
    out["ch07-offload-h200-fit-b"] = _fits(H200_GIB * GIB)
    out["ch07-offload-host-seqs"] = int(128 * GIB // out["ch07-offload-model-seq-gb"] // 1e9)
    if not rec:
        return _rounded(out)
    out["ch07-offload-box"] = box_label(rec, 1)
    out_bw, in_bw = bandwidths(rec)
    out.update({"ch07-offload-out-gbs": out_bw / 1e9, "ch07-offload-in-gbs": in_bw / 1e9})
    for key, name in (
        ("base", "baseline"),
        ("off", "offload"),
        ("soc", "save_on_cpu"),
        ("rec", "recompute"),
        ("big-rec", "recompute, larger micro-batch"),
        ("big-off", "offload, larger micro-batch"),
    ):
        r = by[name]
        if r.get("tokens_per_s"):
            out[f"ch07-offload-{key}-tps"] = r["tokens_per_s"]
            out[f"ch07-offload-{key}-gib"] = r["measured"]
            out[f"ch07-offload-{key}-speed"] = r["tokens_per_s"] / by["baseline"]["tokens_per_s"]
            if r["predicted"]:
                out[f"ch07-offload-{key}-err-pct"] = 100 * (r["predicted"] / r["measured"] - 1)
        if r.get("host"):
            out[f"ch07-offload-{key}-host-gb"] = r["host"]
        if r.get("predicted_tokens_per_s"):
            out[f"ch07-offload-{key}-model-tps"] = r["predicted_tokens_per_s"]
    off, base = by["offload"], by["baseline"]
    if off.get("measured") is not None and base.get("measured") is not None:
        out["ch07-offload-saved-gib"] = base["measured"] - off["measured"]
        out["ch07-offload-off-out-s"] = off["host"] * 1e9 / out_bw  # the copies out of one step
        out["ch07-offload-base-fwd-s"] = off["step_s"] / 3  # a third of the baseline's step
        out["ch07-offload-out-ratio"] = (
            out["ch07-offload-off-out-s"] / out["ch07-offload-base-fwd-s"]
        )
        out["ch07-offload-off-model-err-pct"] = 100 * (
            off["predicted_tokens_per_s"] / off["tokens_per_s"] - 1
        )
    gaps = [
        r["measured"] - r["predicted"]
        for r in all_rows
        if r["mode"] in ("offload", "recompute") and r.get("measured") is not None
    ]
    if gaps:
        out["ch07-offload-gap-lo-gib"], out["ch07-offload-gap-hi-gib"] = min(gaps), max(gaps)
    big_off, big_rec = by["offload, larger micro-batch"], by["recompute, larger micro-batch"]
    if big_off.get("tokens_per_s") and big_rec.get("tokens_per_s"):
        out["ch07-offload-big-rec-over-off"] = big_rec["tokens_per_s"] / big_off["tokens_per_s"]
    return _rounded(out)


def report(n: dict) -> str:
    """What the page says of the recorded run, in numbers of :func:`numbers` (``n``)."""
    return "\n".join(
        [
            f"pinned copies: {n['ch07-offload-out-gbs']} GB/s out, "
            f"{n['ch07-offload-in-gbs']} GB/s back",
            f"offload: {n['ch07-offload-saved-gib']:.1f} GiB less than the baseline at "
            f"{n['ch07-offload-off-speed']:.2f} of its tokens/s",
            f"tokens/s against the baseline: save_on_cpu {n['ch07-offload-soc-speed']:.2f}; "
            f"recomputation {n['ch07-offload-rec-speed']:.2f}",
            f"sent per step: {n['ch07-offload-off-host-gb']} GB "
            f"(model {n['ch07-offload-model-host-gb']}); "
            f"copies out {n['ch07-offload-off-out-s']} s against a forward of "
            f"{n['ch07-offload-base-fwd-s']} s",
            f"time term: {n['ch07-offload-off-model-tps']:,.0f} tokens/s predicted, "
            f"{n['ch07-offload-off-tps']:,} measured",
        ]
    )


def _fits(gpu_bytes: float) -> int:
    """The largest micro-batch whose baseline the model fits in ``gpu_bytes``."""
    return max(m for m in range(1, 129) if predicted("none", m)["total"] <= gpu_bytes)


def _rounded(values: dict) -> dict:
    """Floats to 4 significant digits (stored outputs then hold on any CPU); integers as they
    are."""
    return {
        k: round(v, 3 - math.floor(math.log10(abs(v)))) if isinstance(v, float) and v else v
        for k, v in values.items()
    }


def check_claims(n: dict, rows: list[dict]) -> None:
    """Assert what the page says of the recorded run: losses on their references, the bytes sent
    as modelled, the baseline's peak within 2 %, a small fixed gap for the small-activation runs,
    recomputation faster than offload faster than ``save_on_cpu``, copies longer than the forward,
    the time term within 10 %, and the baseline out of memory where offload fits."""
    big = {r["name"]: r for r in rows}
    assert all(r["loss_ok"] for r in rows if r.get("ok"))
    assert abs(n["ch07-offload-off-host-gb"] / n["ch07-offload-model-host-gb"] - 1) < 0.01
    assert abs(n["ch07-offload-base-err-pct"]) < 2
    assert 0 < n["ch07-offload-gap-lo-gib"] and n["ch07-offload-gap-hi-gib"] < 5
    assert n["ch07-offload-rec-speed"] > n["ch07-offload-off-speed"] > n["ch07-offload-soc-speed"]
    assert n["ch07-offload-out-ratio"] > 1 and abs(n["ch07-offload-off-model-err-pct"]) < 10
    assert big["baseline, larger micro-batch"]["oom"] and big["offload, larger micro-batch"]["ok"]
    assert n["ch07-offload-big-rec-over-off"] > 1
