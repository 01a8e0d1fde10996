"""Chapter 8's flagship runs summarized: one row per run, and the head-to-head's verdict.

:func:`summarize` turns a recorded run's ranks' results into one row: tokens/s per GPU, MFU twice,
peak memory, the loss after n steps and its distance from the single-GPU reference. MFU is
reported twice: ``mfu`` is the book's (:mod:`helpers.cost.mfu`, N = the parameters that do matrix
multiplications); ``mfu_all_params`` counts N = every parameter, the input embedding too, as PaLM
states its formula (Chowdhery et al. 2022, appendix B):
(6N + 12·L·h·s)·tokens / (time · GPUs · 989.5 TFLOP/s). :func:`compare` gives the head-to-head's
medians over its rounds and the ratio to FSDP2's.
"""

from __future__ import annotations

from helpers.cost.mfu import flops_per_token, mfu
from helpers.record.flagship_runs import LOSS_TOLERANCE, ROUND
from helpers.run.result_types.records import FlagshipRun, RunSummary, Verdict
from helpers.train.reference import loss_verdict, mean_losses


def summarize(name: str, run: FlagshipRun) -> RunSummary:
    """One JSON-able row of a run: throughput, both MFUs, memory, losses against the reference."""
    ranks = [r for r in run.get("results", []) if "framework" in r]
    row = {
        "name": name,
        "ok": bool(run.get("ok")) and bool(ranks) and not any(r.get("oom") for r in ranks),
    }
    if not row["ok"]:
        row["error"] = (
            run.get("error") or next((r.get("error") for r in ranks if r.get("error")), "no result")
        )[-300:]
        return row
    r0 = ranks[0]
    gpus, seq = r0["gpus"], r0["seq"]
    mean = mean_losses(ranks)  # equal shards: the mean of the ranks' losses is the global batch's
    verdict = loss_verdict(ranks, LOSS_TOLERANCE)
    all_params = flops_per_token(r0["params"], r0["layers"], r0["hidden"], seq)
    kw = r0.get("plugin_kw") or (
        {"reduce_bucket_size_in_m": r0["bucket_mb"]} if r0.get("bucket_mb") else {}
    )
    row.update(
        framework=r0["framework"],
        plugin=r0["plugin"],
        optimizer=r0["optimizer"],
        compiled=r0.get("compiled"),
        zero_stage=r0.get("zero_stage"),
        norm_on_device=bool(r0.get("norm_on_device")),
        plugin_kw=kw,
        micro_batch=r0["micro_batch"],
        global_batch=r0["global_batch"],
        seq=seq,
        gpus=gpus,
        tokens_per_s_per_gpu=round(r0["tokens_per_s"] / gpus),
        mfu=r0["mfu"],
        mfu_all_params=round(mfu(r0["tokens_per_s"], all_params, gpus), 4),
        peak_gib=round(max(r.get("peak_mib", 0) for r in ranks) / 1024, 1),
        loss_last=round(mean[-1], 4) if mean else None,
        reference=r0["reference"],
        max_ref_gap=verdict["max_ref_gap"],
        loss_ok=verdict["valid"],
        seconds=run.get("seconds"),
        seconds_per_step=r0.get("seconds_per_step"),
        kernels=(r0.get("profile") or {}).get("kernels"),
    )
    return row


def compare(rows: list[RunSummary]) -> list[Verdict]:
    """The head-to-head's verdict: per run, the median over its rounds and the ratio to FSDP2's
    median.

    ``rows`` are :func:`summarize` rows named "<run> · round k"; a run counts only if every round
    that ran finished with its loss on the reference (rounds the budget skipped are left out). The
    ratio is of tokens/s per GPU (the same model, batch and precision, so also of MFU)."""
    import statistics

    groups: dict[str, list[dict]] = {}
    for r in rows:
        if not r["ok"] and r.get("error", "").startswith("skipped"):
            continue  # a round the time budget did not reach is not a round
        groups.setdefault(r["name"].split(ROUND)[0], []).append(r)
    out = []
    for name, rs in groups.items():
        valid = all(r["ok"] and r["loss_ok"] for r in rs)
        speeds = [r["tokens_per_s_per_gpu"] for r in rs if r["ok"]]
        out.append(
            {
                "name": name,
                "rounds": len(rs),
                "valid": valid,
                "framework": next((r["framework"] for r in rs if r["ok"]), None),
                "tokens_per_s_per_gpu": speeds,
                "median": statistics.median(speeds) if speeds else None,
                "mfu_median": statistics.median(r["mfu"] for r in rs if r["ok"])
                if speeds
                else None,
                "mfu_all_params_median": statistics.median(
                    r["mfu_all_params"] for r in rs if r["ok"]
                )
                if speeds
                else None,
                "spread": round((max(speeds) - min(speeds)) / statistics.median(speeds), 4)
                if speeds
                else None,
            }
        )
    fsdp = [g for g in out if g["framework"] == "fsdp2" and g["valid"]]
    for g in out:
        g["vs_fsdp2"] = round(g["median"] / fsdp[0]["median"], 4) if fsdp and g["median"] else None
    return out
