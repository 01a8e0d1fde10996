"""Tables for Chapters 6 and 8 from the recorded GPU runs (``helpers.chapter08``), and the
communication model's case for keeping tensor parallelism inside a node.

A part that is not recorded yet yields no rows and :func:`missing` says which command records it;
nothing here invents a number.
"""

from __future__ import annotations

from helpers.comm import NOMINAL_LINKS, ops_time, tp_layer_ops
from helpers.demos.ch09_hybrid import PEAK_FLOPS

RECORD_COMMAND = "python -m helpers.chapter08 --record --parts {part}"


def recorded(part: str) -> dict | None:
    """The newest GPU record ``ch08_<part>``, or None."""
    from helpers.results import load

    try:
        return load(f"ch08_{part}")
    except FileNotFoundError:
        return None


def missing(part: str) -> str:
    return (f"Not recorded yet: results/<gpus>/ch08_{part}.json is absent. On a box with two GPUs run\n"
            f"    {RECORD_COMMAND.format(part=part)}")


def _runs(record: dict) -> list[dict]:
    return [r for r in record["runs"] if "name" in r]


def _mean_losses(results: list[dict]) -> list[float]:
    """The global loss per step: the mean over the ranks that report one (dp ranks, or the last stage)."""
    per_rank = [r["losses"] for r in results if r.get("losses")]
    steps = max((len(x) for x in per_rank), default=0)
    out = []
    for k in range(steps):
        vals = [x[k] for x in per_rank if k < len(x) and x[k] is not None]
        out.append(sum(vals) / len(vals) if vals else float("nan"))
    return out


def _summary(run: dict) -> dict:
    res = run.get("results", [])
    row = {"run": run["name"], "ok": "yes" if run.get("ok") else "FAILED"}
    if not res:
        row["note"] = (run.get("error") or "").strip().splitlines()[-1][:120] if run.get("error") else ""
        return row
    r0 = res[0]
    if r0.get("oom"):
        row.update(note="out of memory (caught)", **{"peak GiB": round(max(r.get("peak_mib", 0) for r in res) / 1024, 2)})
        return row
    mean = _mean_losses(res)
    ref = r0.get("reference") or []
    diff = max((abs(a - b) for a, b in zip(mean, ref)), default=None)
    shares = [r["profile"]["comm_share"] for r in res if r.get("profile")]
    row.update({"tokens/s": f"{r0['tokens_per_s']:,}", "MFU": f"{r0['mfu']:.1%}",
                "peak GiB": round(max(r.get("peak_mib", 0) for r in res) / 1024, 2),
                "loss vs reference": "—" if diff is None else f"{diff:.3f}",
                "comm share per rank": " / ".join(f"{s:.0%}" for s in shares)})
    return row


def rows(part: str) -> list[dict]:
    """One summary row per recorded run of ``part`` (empty when not recorded)."""
    record = recorded(part)
    return [] if record is None else [_summary(r) for r in _runs(record)]


def oom_info() -> dict | None:
    record = recorded("oom")
    return None if record is None else next((r["info"] for r in record["runs"] if "info" in r), None)


# -- Chapter 6: when to choose which ------------------------------------------------------------
def decision_rows() -> list[dict]:
    """The seed's "when to choose which", each row with the evidence the book has for it."""
    compare = {r["run"]: r for r in rows("compare")}
    fsdp = next((r for k, r in compare.items() if "FSDP2" in k), None)
    zero = next((r for k, r in compare.items() if "LowLevelZero" in k), None)
    tp = next((r for k, r in compare.items() if "tp=2" in k), None)
    pending = "pending: " + RECORD_COMMAND.format(part="compare")
    fmt = lambda r: f"{r['run']}: MFU {r.get('MFU', '—')}, peak {r.get('peak GiB', '—')} GiB" if r else pending  # noqa: E731
    return [
        {"situation": "the model fits one GPU once its model states are sharded over data parallelism",
         "choose": "ZeRO / FSDP (DeepSpeed ZeRO, Colossal-AI LowLevelZero/Gemini, PyTorch FSDP2)",
         "evidence": f"{fmt(fsdp)}; {fmt(zero)}"},
        {"situation": "one layer's weights or activations do not fit one GPU (tens to hundreds of billions)",
         "choose": "tensor (+ sequence) parallelism inside a node: Megatron-LM, or Colossal-AI HybridParallel",
         "evidence": f"{fmt(tp)} (on 2 GPUs TP costs throughput; it buys memory per layer, Chapter 7)"},
        {"situation": "one configuration for TP, PP, SP and ZeRO together, Hugging Face models as they are",
         "choose": "Colossal-AI (plugins + shardformer policies)",
         "evidence": "Chapter 4's config → plugin mapping and this chapter's converters (tests)"},
        {"situation": "pure data parallelism, no new framework wanted",
         "choose": "PyTorch FSDP2 (fully_shard)",
         "evidence": fmt(fsdp)},
    ]


# -- Chapter 8: keep tensor parallelism inside a node ------------------------------------------
def tp_placement_rows(params: float = 70e9, layers: int = 80, hidden: int = 8192, micro_batch: int = 1,
                      seq: int = 4096, tp: int = 8, mfu: float = 0.4) -> list[dict]:
    """Per-step TP communication time vs compute time on one GPU, with the TP group on NVLink or
    spanning InfiniBand (nominal links of :mod:`helpers.comm`, no overlap assumed).

    Compute: 6·Ψ/t FLOPs per token (each TP rank holds 1/t of the matrices) at ``mfu`` of the bf16
    peak; communication: Megatron's 4 all-reduces of b·s·h per layer (Shoeybi et al. 2019).
    """
    tokens = micro_batch * seq
    compute = 6 * params / tp * tokens / (mfu * PEAK_FLOPS)
    ops = tp_layer_ops(micro_batch, seq, hidden) * layers
    out = []
    for key in ("nvlink4", "ib_ndr"):
        link = NOMINAL_LINKS[key]
        comm = ops_time(ops, tp, link)
        out.append({"TP group on": link.name.split(" (")[0], "TP comm ms": round(comm * 1e3, 1),
                    "compute ms": round(compute * 1e3, 1), "comm share": f"{comm / (comm + compute):.0%}"})
    return out
