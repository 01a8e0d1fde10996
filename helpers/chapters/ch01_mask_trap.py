"""Chapter 1, "A trap: the causal mask goes missing": the mask demo's runs read beside the recorded
2-GPU run (``helpers.demos.ch01_mask``; ``helpers.record.ch01``).

:func:`mask_trap_facts` gathers what the runs show, with no verdict of its own: the mask the first
layer gets, where attention goes at initialisation without it, the CPU replay beside the recorded
losses, and the smaller model that learns to copy the visible answer. Notebook 01 prints each fact
and asserts, in the same cell, what the chapter says of it.
"""

from __future__ import annotations

import math


def mask_trap_facts(results: list[dict], runs: list[dict]) -> dict:
    """``results``: the mask demo's RESULT lines; ``runs``: the recorded 2-GPU runs."""
    seen = {r["attn"]: r for r in results if r["part"] == "mask"}
    replay = {r["attn"]: r["losses"] for r in results if r["part"] == "replay"}
    small = {r["attn"]: r for r in results if r["part"] == "small"}
    [trap] = [r for r in runs if r["attn"] == "sdpa"]  # the recorded run without its mask
    n = len(replay["sdpa"])
    eager = seen["eager"]
    return {
        "batch": eager["mask"][0] if eager["mask"] else None,
        "seq": seen["sdpa"]["seq"],
        "eager_mask": tuple(eager["mask"]) if eager["mask"] else None,
        "sdpa_mask": tuple(seen["sdpa"]["mask"]) if seen["sdpa"]["mask"] else None,
        "blocked": eager["blocked"],
        "eager_later_share": eager["later_share"],
        "later_share": seen["sdpa"]["later_share"],
        "next_share": seen["sdpa"]["next_share"],
        "replayed_steps": n,
        "replay_free": replay["sdpa"],
        "replay_masked": replay["eager"],
        "recorded_free": trap["losses"][:n],
        "recorded_masked": trap["reference"][:n],
        "replay_gap": max(
            max(abs(x - y) for x, y in zip(replay["sdpa"], trap["losses"])),
            max(abs(x - y) for x, y in zip(replay["eager"], trap["reference"])),
        ),
        "recorded_steps": len(trap["losses"]),
        "trap_first": trap["losses"][0],
        "trap_last": trap["losses"][-1],
        "reference_last": trap["reference"][-1],
        "uniform_loss": math.log(128),  # a uniform guess over the 128-token vocabulary
        "small_steps": len(small["sdpa"]["losses"]),
        "small_free": small["sdpa"]["losses"][-1],
        "small_masked": small["eager"]["losses"][-1],
        "small_free_causal": small["sdpa"]["causal_mask"],
        "small_masked_causal": small["eager"]["causal_mask"],
    }
