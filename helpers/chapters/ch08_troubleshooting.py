"""Tables for Chapters 6 and 8 from the recorded GPU runs (``helpers.record.ch08``), and the
communication model's case for keeping tensor parallelism inside a node.

Used by ``notebooks/06_frameworks.ipynb`` (also :func:`gemini_rows`: Gemini with and without its
asynchronous gradient reduce) and ``notebooks/08_troubleshooting.ipynb``. A part that
is not recorded yet yields no rows and :func:`missing` says which command records it; nothing here
invents a number. :func:`loss_verdict` marks a run whose loss is not finite or departs from the
single-GPU reference: its speed does not count. Tensor-parallel placement is
:mod:`helpers.chapters.ch08_tp_placement`.
"""

from __future__ import annotations

import math

from helpers.record import results
from helpers.run.result_types.records import FlagshipRun, Record
from helpers.train.reference import loss_verdict, mean_losses

RECORD_COMMAND = "python -m helpers.record ch08 --record --only {part}"


def recorded(part: str, gpus: int = 2) -> Record | None:
    """:func:`helpers.record.results.recorded`: ``ch08_<part>`` on ``gpus`` GPUs (default 2)."""
    return results.recorded("ch08", part, gpus=gpus)


def missing(part: str) -> str:
    return (
        f"Not recorded yet: results/<gpus>/ch08_{part}.json is absent. On a box with two GPUs run\n"
        f"    {RECORD_COMMAND.format(part=part)}"
    )


def _runs(record: Record) -> list[FlagshipRun]:
    """The runs of ``helpers.demos.ch08_train`` (a record's other entries carry no ``name``)."""
    return [r for r in record["runs"] if "name" in r]


def point(run: FlagshipRun) -> dict:
    """The numbers of one recorded run: rank 0's throughput and MFU, the peak over ranks, each
    rank's profile, the loss verdict; ``oom`` when a rank ran out of memory, ``failed`` when it did
    not run."""
    res = run.get("results", [])
    if not res:
        return {"name": run["name"], "failed": True, "error": (run.get("error") or "").strip()}
    r0 = res[0]
    out = {
        "name": run["name"],
        "failed": False,
        "oom": any(r.get("oom") for r in res),
        "peak_gib": max(r.get("peak_mib", 0) for r in res) / 1024,
        "peak_gib_per_rank": [r.get("peak_mib", 0) / 1024 for r in res],
    }
    if out["oom"]:
        return out
    return {
        **out,
        "tokens_per_s": r0["tokens_per_s"],
        "tokens_per_s_per_gpu": r0["tokens_per_s"] / r0["gpus"],
        "mfu": r0["mfu"],
        "global_batch": r0["global_batch"],
        "seconds_per_step": r0["seconds_per_step"],
        "losses": mean_losses(res),
        "profiles": [r.get("profile") for r in res],
        **loss_verdict(res),
    }


def points(part: str) -> list[dict]:
    """:func:`point` of every recorded run of ``part`` (empty when not recorded)."""
    record = recorded(part)
    return [] if record is None else [point(r) for r in _runs(record)]


def _summary(run: FlagshipRun) -> dict:
    p = point(run)
    row = {"run": run["name"], "ok": "yes" if run.get("ok") else "FAILED"}
    if p["failed"]:
        row["note"] = p["error"].splitlines()[-1][:120] if p["error"] else ""
        return row
    if p["oom"]:
        row.update(note="out of memory (caught)", **{"peak GiB": round(p["peak_gib"], 2)})
        return row
    ref = next((r["reference"] for r in run["results"] if r.get("reference")), [])
    diffs = [abs(a - b) for a, b in zip(p["losses"], ref)]
    diff = (
        "—" if not diffs else "NaN" if not all(map(math.isfinite, diffs)) else f"{max(diffs):.3f}"
    )
    row.update(
        {
            "tokens/s": f"{p['tokens_per_s']:,}",
            "MFU": f"{100 * p['mfu']:.2f} %",
            "peak GiB": round(p["peak_gib"], 2),
            "loss vs reference": diff,
            "valid": "yes" if p["valid"] else "NO: " + p["reason"],
            "comm share per rank": " / ".join(f"{q['comm_share']:.0%}" for q in p["profiles"] if q),
        }
    )
    return row


def rows(part: str) -> list[dict]:
    """One summary row per recorded run of ``part`` (empty when not recorded)."""
    record = recorded(part)
    return [] if record is None else [_summary(r) for r in _runs(record)]


# -- Chapter 6: Gemini's NaN and its asynchronous gradient reduce ---------------------------------
def first_nonfinite_step(losses: list[float]) -> int | None:
    """The 1-based step of the first loss that is missing or not finite; None when all are
    finite."""
    return next((k + 1 for k, x in enumerate(losses) if x is None or not math.isfinite(x)), None)


def async_reduce(run: FlagshipRun) -> bool:
    """Whether a Gemini run kept its asynchronous gradient reduce-scatter: the recorded plugin
    kwargs' ``enable_async_reduce``, else GeminiPlugin's default (True in Colossal-AI 0.5.0)."""
    return next(
        (
            r["plugin_kw"]["enable_async_reduce"]
            for r in run.get("results", [])
            if "enable_async_reduce" in (r.get("plugin_kw") or {})
        ),
        True,
    )


def gemini_points() -> dict[bool, dict]:
    """Chapter 6: :func:`point` of each run of part ``gemini`` (the 0.94 B Llama under Gemini with
    the asynchronous gradient reduce on, the default, and off), keyed by ``enable_async_reduce``; {}
    when not recorded."""
    record = recorded("gemini")
    return {} if record is None else {async_reduce(run): point(run) for run in _runs(record)}


def gemini_rows() -> list[dict]:
    """One row per Gemini run of part ``gemini``: tokens/s and MFU (rank 0), the mean loss of the
    first three steps against the single-GPU reference, the first step whose mean loss is not
    finite, and :func:`loss_verdict`."""
    record = recorded("gemini")
    out = []
    for run in [] if record is None else _runs(record):
        p = point(run)
        row = {"run": run["name"], "enable_async_reduce": str(async_reduce(run))}
        if p["failed"] or p["oom"]:
            out.append(
                {
                    **row,
                    "valid": "did not run: "
                    + (p.get("error") or "out of memory").splitlines()[-1][:120],
                }
            )
            continue
        ref = next((r["reference"] for r in run["results"] if r.get("reference")), [])
        bad = first_nonfinite_step(p["losses"])
        out.append(
            {
                **row,
                "tokens/s": f"{p['tokens_per_s']:,}",
                "MFU": f"{100 * p['mfu']:.1f} %",
                "mean loss, steps 1-3": ", ".join(f"{x:.3f}" for x in p["losses"][:3]),
                "reference, steps 1-3": ", ".join(f"{x:.3f}" for x in ref[:3]),
                "first non-finite step": f"{bad} of {len(p['losses'])}"
                if bad
                else f"none of {len(p['losses'])}",
                "valid": "yes" if p["valid"] else "NO: " + p["reason"],
            }
        )
    return out


def info(part: str) -> dict:
    """The recorder's notes for a part (DeepSpeed importable; the OOM cap and predictions), or
    {}."""
    record = recorded(part)
    return {} if record is None else next((r["info"] for r in record["runs"] if "info" in r), {})


def oom_info() -> dict | None:
    return info("oom") or None


def profile_rows(part: str) -> list[dict]:
    """Per run and rank: compute, communication and exposed communication (ms per step) and the
    share."""
    out = []
    for p in points(part):
        for rank, q in enumerate(p.get("profiles") or []):
            if q:
                out.append(
                    {
                        "run": p["name"],
                        "rank": rank,
                        "compute ms": q["compute_ms"],
                        "comm ms": q["comm_ms"],
                        "exposed comm ms": q["exposed_comm_ms"],
                        "comm share": f"{q['comm_share']:.0%}",
                    }
                )
    return out


def oom_rows() -> list[dict]:
    """The OOM lab: predicted peak (Chapter 7's model), measured peak, the cap, the outcome,
    throughput."""
    cap, predicted = oom_info()["cap_gib"], oom_info()["predicted_peak_gib"]
    out = []
    for p in points("oom"):
        pred = predicted.get(p["name"]) or predicted.get(p["name"].replace("no cap", "capped"))
        capped = "no cap" not in p["name"]
        out.append(
            {
                "run": p["name"],
                "predicted GiB": pred,
                "measured peak GiB": round(p["peak_gib"], 2),
                "cap GiB": cap if capped else "—",
                "outcome": "out of memory" if p["oom"] else "fits" if capped else "runs",
                "tokens/s": "—" if p["oom"] else f"{p['tokens_per_s']:,}",
            }
        )
    return out
