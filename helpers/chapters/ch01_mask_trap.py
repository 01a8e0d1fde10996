"""Chapter 1, "A trap: the causal mask goes missing": the mask demo's runs read against the
recorded 2-GPU run (``helpers.demos.ch01_mask``; ``helpers.record.ch01``).

:func:`mask_trap_lines` checks what the runs must show (the mask the first layer gets, where the
attention goes at initialisation, the CPU replay equal to the recorded losses, the smaller model
that learns to copy the visible answer; a ``ValueError`` names what does not hold) and returns the
notebook's lines, with the values that vary between CPUs rounded (:mod:`helpers.notebook.measured`).
"""

from __future__ import annotations

import math

from helpers.notebook.measured import approx, approx_list


def mask_trap_lines(results: list[dict], runs: list[dict]) -> list[str]:
    """``results``: the mask demo's RESULT lines; ``runs``: the recorded 2-GPU runs."""
    out: list[str] = []
    seen = {r["attn"]: r for r in results if r["part"] == "mask"}
    replay = {r["attn"]: r["losses"] for r in results if r["part"] == "replay"}
    small = {r["attn"]: r for r in results if r["part"] == "small"}
    [trap] = [r for r in runs if r["attn"] == "sdpa"]  # the recorded run without its mask
    n, s = len(replay["sdpa"]), seen["sdpa"]["seq"]

    _require(
        seen["sdpa"]["mask"] is None and seen["eager"]["mask"] == [8, 1, s, s],
        "eager attention gets the (8, 1, s, s) causal mask, SDPA none",
    )
    _require(
        seen["eager"]["blocked"] == 8 * s * (s - 1) // 2 and seen["eager"]["later_share"] == 0,
        "the mask blocks every later position",
    )
    _require(
        abs(seen["sdpa"]["later_share"] - 0.5) < 0.01
        and abs(seen["sdpa"]["next_share"] * s - 1) < 0.2,
        "without it, half the attention goes to later positions, 1/s to the next one",
    )
    _require(
        max(abs(a - b) for a, b in zip(replay["sdpa"], trap["losses"])) < 2e-3
        and max(abs(a - b) for a, b in zip(replay["eager"], trap["reference"])) < 2e-3,
        "the CPU replay gives the recorded losses, with and without the mask",
    )
    _require(
        small["sdpa"]["losses"][-1] < min(0.05, small["eager"]["losses"][-1] / 4)
        and small["sdpa"]["causal_mask"] > 3 * small["eager"]["causal_mask"],
        "the smaller model learns to copy the visible answer and fails under a causal mask",
    )

    out.append(
        f"mask handed to the first layer: eager {tuple(seen['eager']['mask'])}, "
        f"{seen['eager']['blocked']:,} of {8 * s * s:,} entries blocked; sdpa none"
    )
    out.append(
        f"attention at initialisation without it: {approx(seen['sdpa']['later_share'])} on later "
        f"positions, {approx(seen['sdpa']['next_share'], '.4f')} on the next one "
        f"(1/{s} = {1 / s:.4f})"
    )
    out.append(
        f"first {n} steps on the CPU, without the mask: {approx_list(replay['sdpa'], '.3f')}"
    )
    out.append(f"  recorded on 2 GPUs (sdpa run):        {trap['losses'][:n]}")
    out.append(
        f"first {n} steps on the CPU, with the mask:    {approx_list(replay['eager'], '.3f')}"
    )
    out.append(f"  recorded reference:                   {trap['reference'][:n]}")
    out.append(
        f"recorded, {len(trap['losses'])} steps: without the mask {trap['losses'][0]} -> "
        f"{trap['losses'][-1]} (ln 128 = {math.log(128):.3f}); "
        f"reference {trap['reference'][0]} -> {trap['reference'][-1]}"
    )
    out.append(
        f"smaller Llama, {len(small['sdpa']['losses'])} steps: training loss without the mask "
        f"{approx(small['sdpa']['losses'][-1])}, with it {approx(small['eager']['losses'][-1])}; "
        f"evaluated with a causal mask {approx(small['sdpa']['causal_mask'])} and "
        f"{approx(small['eager']['causal_mask'])}"
    )
    return out


def _require(holds: bool, what: str) -> None:
    if not holds:
        raise ValueError(f"the mask demo's runs do not show what Chapter 1 says: {what}")
