"""Chapter 10's pitfalls of the layout rules: layouts that :mod:`helpers.parallel.layouts` refuses.

Each demo asks for a layout that breaks a rule of Chapter 2 (D = G/(T·P) an integer, T dividing
the heads, sp_size with split_gather) or Chapter 4 (ZeRO-2 with a pipeline), shows the refusal and
a layout that passes, as a :class:`~helpers.chapters.ch10_shown.Shown`.
"""

from __future__ import annotations

from typing import Callable

from helpers.chapters.ch10_shown import Shown
from helpers.parallel.layouts import QWEN2_7B, Layout, data_degree, violations


def _refused(call: Callable[[], object]) -> str | None:
    """The ValueError text ``call`` raises, or None when it does not raise."""
    try:
        call()
    except ValueError as err:
        return str(err)
    return None


def data_degree_not_integer(G: int = 48, tp: int = 8, pp: int = 4) -> Shown:
    err = _refused(lambda: data_degree(G, tp, pp))
    return Shown(
        wrong=f"data_degree({G}, tp={tp}, pp={pp}): {err}",
        fixed=f"data_degree({G}, tp=4, pp=4) = {data_degree(G, 4, 4)}",
        holds=err is not None and data_degree(G, 4, 4) == 3,
    )


def zero2_with_pipeline() -> Shown:
    bad, good = (
        Layout(dp=2, pp=2, microbatch=1, zero_stage=2),
        Layout(dp=2, pp=2, microbatch=1, zero_stage=1),
    )
    return Shown(
        wrong=f"{bad}, ZeRO-2: {violations(bad)}",
        fixed=f"{good}, ZeRO-1: {violations(good) or 'valid'}",
        holds=bool(violations(bad)) and not violations(good),
    )


def sp_size_with_split_gather() -> Shown:
    err = _refused(lambda: data_degree(8, tp=2, pp=1, sp=4, sp_mode="split_gather"))
    return Shown(
        wrong=f"data_degree(8, tp=2, sp=4, split_gather): {err}",
        fixed=f"leave sp at 1 (S = T = 2): D = {data_degree(8, 2, 1, 1, 'split_gather')}; or "
        f"all_to_all with sp=4: D = {data_degree(8, 2, 1, 4, 'all_to_all')}",
        holds=err is not None,
    )


def heads_not_divisible(G: int = 64) -> Shown:
    bad, good = Layout.for_world(G, tp=8), Layout.for_world(G, tp=4)
    return Shown(
        wrong=f"Qwen2-7B ({QWEN2_7B.heads} heads, {QWEN2_7B.kv} KV heads) with {bad}: "
        f"{violations(bad, QWEN2_7B)}",
        fixed=f"{good}: {violations(good, QWEN2_7B) or 'valid'}",
        holds=bool(violations(bad, QWEN2_7B)) and not violations(good, QWEN2_7B),
    )
