"""Chapter 1, "A trap: the causal mask goes missing": the mask demo's runs read beside the recorded
2-GPU run (``helpers.demos.ch01_mask``; ``helpers.record.ch01``).

:func:`mask_trap_facts` gathers what the runs show, with no verdict of its own: the mask the first
layer gets, where attention goes at initialisation without it, the CPU replay beside the recorded
losses, and the smaller model that learns to copy the visible answer. Notebook 01 prints each fact
(:func:`mask_trap_lines`), asserts in the same cell what the chapter says of it, and glues the
smaller model's losses (:func:`mask_trap_numbers`).
"""

from __future__ import annotations

import math

from helpers.notebook.measured import approx, approx_list


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


def mask_trap_lines(t: dict) -> list[str]:
    """The facts of :func:`mask_trap_facts`, as notebook 01 prints them (measured values: ≈)."""
    b, s, n = t["batch"], t["seq"], t["replayed_steps"]
    return [
        f"mask handed to the first layer: eager {t['eager_mask']}, sdpa {t['sdpa_mask']}",
        f"eager blocks {t['blocked']:,} of {b * s * s:,} scores: every later position",
        f"sdpa at initialisation: {approx(t['later_share'])} of attention on later positions, "
        f"{approx(t['next_share'], '.4f')} on the next",
        f"first {n} steps on the CPU, sdpa:  {approx_list(t['replay_free'], '.3f')}",
        f"  recorded on 2 GPUs:           {t['recorded_free']}",
        f"first {n} steps on the CPU, eager: {approx_list(t['replay_masked'], '.3f')}",
        f"  recorded reference:           {t['recorded_masked']}",
        f"recorded, {t['recorded_steps']} steps: sdpa {t['trap_first']} -> {t['trap_last']} "
        f"(ln 128 = {t['uniform_loss']:.3f}); reference -> {t['reference_last']}",
        f"smaller Llama, {t['small_steps']} steps: training loss without the mask "
        f"{approx(t['small_free'])}, with it {approx(t['small_masked'])}",
        f"  evaluated with a causal mask: {approx(t['small_free_causal'])} and "
        f"{approx(t['small_masked_causal'])}",
    ]


def mask_trap_numbers(t: dict) -> dict[str, str]:
    """The smaller model's losses that the page glues, without and with the mask and evaluated
    with a causal mask."""
    return {
        "ch01-mask-small-free": approx(t["small_free"], ".2f"),
        "ch01-mask-small-masked": approx(t["small_masked"], ".1f"),
        "ch01-mask-small-free-causal": approx(t["small_free_causal"], ".1f"),
    }
