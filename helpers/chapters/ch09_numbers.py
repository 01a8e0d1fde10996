"""Chapter 9's numbers, read from its GPU records for the notebook to print, check and glue.

One function per recorded part (``results/<hardware>/ch09_<part>.json``, read with
:func:`helpers.chapters.ch09_records.recorded`): :func:`resnet_numbers`, :func:`hybrid_numbers`,
:func:`nan_numbers`, :func:`moe_numbers` and :func:`sp_numbers`. Keys are ``ch09-…``; values are
unrounded (the page formats them) and percentages are in percent.
"""

from __future__ import annotations

from helpers.chapters.ch09_records import first_rank

TEST_IMAGES = 359  # the digits' fixed test split (helpers.models.data)


def _runs(record: dict) -> dict:
    return {run["name"]: run for run in record["runs"]}


def resnet_numbers(two: dict, one: dict | None) -> dict:
    """The ResNet runs: each plugin's test accuracy (%), images right, the spread, how far
    low_level_zero and gemini agree, and the one-GPU box's baseline."""
    from helpers.chapters.ch09_resnet import SEED_RESNET

    acc = {
        first_rank(run, "accuracy").get("plugin", "?")
        + ("-1" if first_rank(run, "accuracy").get("world_size") == 1 else ""): first_rank(
            run, "accuracy"
        )
        for run in two["runs"]
    }
    two_gpu = [acc[p]["accuracy"] for p in ("torch_ddp", "torch_ddp_fp16", "low_level_zero")]
    two_gpu.append(acc["gemini"]["accuracy"])
    zero, gemini = acc["low_level_zero"], acc["gemini"]
    out = {
        "ch09-acc-1gpu": 100 * acc["torch_ddp-1"]["accuracy"],
        "ch09-acc-ddp": 100 * acc["torch_ddp"]["accuracy"],
        "ch09-acc-fp16": 100 * acc["torch_ddp_fp16"]["accuracy"],
        "ch09-acc-zero": 100 * zero["accuracy"],
        "ch09-acc-gemini": 100 * gemini["accuracy"],
        "ch09-right-1gpu": round(acc["torch_ddp-1"]["accuracy"] * TEST_IMAGES),
        "ch09-right-lo": round(min(two_gpu) * TEST_IMAGES),
        "ch09-right-hi": round(max(two_gpu) * TEST_IMAGES),
        "ch09-one-image-pct": 100 / TEST_IMAGES,
        "ch09-spread-pct": 100 * (max(two_gpu) - min(two_gpu)),
        "ch09-seed-spread-pct": max(SEED_RESNET.values()) - min(SEED_RESNET.values()),
        "ch09-zg-equal-epochs": sum(a == b for a, b in zip(zero["losses"], gemini["losses"])),
        "ch09-epochs": len(zero["losses"]),
        "ch09-zg-max-diff": max(abs(a - b) for a, b in zip(zero["losses"], gemini["losses"])),
        "ch09-gemini-slower": max(r["images_per_s"] for r in acc.values()) / gemini["images_per_s"],
    }
    base = first_rank(one["runs"][0], "accuracy") if one else {}
    if "accuracy" in base:
        out["ch09-acc-one-box"] = 100 * base["accuracy"]
        out["ch09-right-one-box"] = round(base["accuracy"] * TEST_IMAGES)
    return out


def hybrid_numbers(record: dict) -> dict:
    """The hybrid layouts: MFU and tokens/s of each, the speed-up of two GPUs over one, the loss
    against the single-GPU reference, and each layout's largest peak memory."""
    from helpers.chapters.ch09_hybrid_layouts import mfu_of, peak_gib, slowest

    runs = _runs(record)
    keys = {
        "1 GPU": "1gpu",
        "dp=2 ZeRO-1": "dp",
        "tp=2": "tp",
        "pp=2 (1F1B, mbs 4)": "pp",
        "tp=2 + split_gather SP": "sg",
        "sp=2 all_to_all": "a2a",
    }
    out, speed = {}, {}
    for name, key in keys.items():
        run = runs[name]
        out[f"ch09-mfu-{key}"] = 100 * mfu_of(slowest(run))
        out[f"ch09-peak-{key}-gib"] = peak_gib(run)
        out[f"ch09-diff-{key}"] = first_rank(run)["max_diff"]
        out[f"ch09-last-loss-{key}"] = first_rank(run)["losses"][-1]
        speed[key] = slowest(run)["tokens_per_s"]
    out["ch09-tp-tokens"] = speed["tp"]
    two = [k for k in keys.values() if k != "1gpu"]
    ratios = [speed[k] / speed["1gpu"] for k in two]
    out["ch09-speedup-lo"], out["ch09-speedup-hi"] = min(ratios), max(ratios)
    out["ch09-mfu-two-lo"] = min(out[f"ch09-mfu-{k}"] for k in two)
    out["ch09-mfu-two-hi"] = max(out[f"ch09-mfu-{k}"] for k in two)
    exact = [out[f"ch09-diff-{k}"] for k in ("1gpu", "dp", "tp", "sg")]
    out["ch09-diff-lo-e3"], out["ch09-diff-hi-e3"] = 1e3 * min(exact), 1e3 * max(exact)
    out["ch09-sg-more-gib"] = out["ch09-peak-sg-gib"] - out["ch09-peak-tp-gib"]
    return out


def nan_study(run: dict) -> dict:
    """One run of a NaN study: its first, last and step-11 loss, steps, whether every loss is
    finite, and the largest logit it saw (None where the run reported no losses)."""
    r = first_rank(run)
    if "losses" not in r:
        return {"name": run["name"], "losses": None}
    losses = r["losses"]
    return {
        "name": run["name"],
        "losses": losses,
        "first": losses[0],
        "last": losses[-1],
        "step11": losses[11],
        "steps": len(losses),
        "finite": all(x == x and abs(x) != float("inf") for x in losses),
        "max_logit": max((w["logit_absmax"] for w in r.get("watch", [])), default=None),
    }


def nan_numbers(nan: dict, nan2048: dict) -> dict:
    """The NaN study at sequence 1,024 and 2,048: the losses the page quotes."""
    short = [nan_study(run) for run in nan["runs"]]
    tp, gathered, dp, fresh = short
    gap = [max(abs(a - b) for a, b in zip(tp["losses"], x["losses"])) for x in (gathered, dp)]
    step = max(
        range(tp["steps"]),
        key=lambda k: max(abs(tp["losses"][k] - x["losses"][k]) for x in (gathered, dp)),
    )
    tp2, dp2 = (nan_study(run) for run in nan2048["runs"][:2])
    return {
        "ch09-nan-first": tp["first"],
        "ch09-nan-last": tp["last"],
        "ch09-nan-step11": tp["step11"],
        "ch09-nan-logit": tp["max_logit"],
        "ch09-nan-gap": max(gap),
        "ch09-nan-gap-step": step,
        "ch09-nan-others-last": max(gathered["last"], dp["last"]),
        "ch09-nan-fresh-last": fresh["last"],
        "ch09-nan2048-first": tp2["first"],
        "ch09-nan2048-last": tp2["last"],
        "ch09-nan2048-step11": tp2["step11"],
        "ch09-nan2048-logit": tp2["max_logit"],
        "ch09-nan2048-dp-first": dp2["first"],
        "ch09-nan2048-dp-last": dp2["last"],
        "ch09-nan2048-dp-step11": dp2["step11"],
    }


def moe_numbers(record: dict) -> dict:
    """The two Mixtral runs: tokens/s, the speed-up of ep = 2, losses, peaks, and the bf16
    weights and gradients of the experts that ep = 1 holds twice."""
    ep2, ep1 = (first_rank(run) for run in record["runs"])
    return {
        "ch09-moe-params-b": ep2["params"] / 1e9,
        "ch09-moe-expert-m": ep2["expert_params"] / 1e6,
        "ch09-moe-local-m": ep2["local_expert_params"] / 1e6,
        "ch09-moe-ep2-tokens": ep2["tokens_per_s"],
        "ch09-moe-ep1-tokens": ep1["tokens_per_s"],
        "ch09-moe-speedup": ep2["tokens_per_s"] / ep1["tokens_per_s"],
        "ch09-moe-first": ep2["losses"][0],
        "ch09-moe-last": ep2["losses"][-1],
        "ch09-moe-diff-e3": 1e3 * max(ep2["max_diff"], ep1["max_diff"]),
        "ch09-moe-ep2-gib": ep2["peak_mib"] / 1024,
        "ch09-moe-ep1-gib": ep1["peak_mib"] / 1024,
        "ch09-moe-dup-gib": ep2["local_expert_params"] * 4 / 2**30,  # bf16 weight + gradient
        "ch09-moe-gap-gib": (ep1["peak_mib"] - ep2["peak_mib"]) / 1024,
    }


def sp_numbers(record: dict) -> dict:
    """The sequence sweep: the longest length each layout ran and its peak, where it ran out of
    memory, the allocation that failed, and the speeds at 2,048 and 8,192 tokens."""
    from helpers.chapters.ch09_sequence_parallel import gpu_capacity_gib, oom_request_gib
    from helpers.chapters.ch09_sequence_parallel import sweep_points

    runs = [run for run in record["runs"] if sweep_points(run)]
    keys = dict(zip(("tp", "sg", "a2a"), runs))
    out = {"ch09-sp-capacity-gib": gpu_capacity_gib(runs)}
    for key, run in keys.items():
        points = sweep_points(run)
        fits = [p for p in points if not p["oom"]]
        oom = next(p for p in points if p["oom"])
        out[f"ch09-sp-{key}-longest"] = fits[-1]["seq"]
        out[f"ch09-sp-{key}-oom"] = oom["seq"]
        out[f"ch09-sp-{key}-oom-ask-gib"] = oom_request_gib(oom)
        out[f"ch09-sp-{key}-oom-held-gib"] = oom["peak_mib"] / 1024
        for p in fits:
            out[f"ch09-sp-{key}-{p['seq']}-tokens"] = p["tokens_per_s"]
            out[f"ch09-sp-{key}-{p['seq']}-gib"] = p["peak_mib"] / 1024
    free = keys["a2a"] and next(p for p in sweep_points(keys["a2a"]) if p["oom"])["error"]
    out["ch09-sp-a2a-free-gib"] = float(free.split(" of which ")[1].split(" GiB")[0])
    return out
