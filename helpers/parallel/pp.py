"""Pipeline-parallel bookkeeping: which layers each stage holds, and how idle the GPipe schedule is.

Used by Chapter 1's pipeline demo (``helpers/demos/ch01_pp.py``) and its notebook, which calls
:func:`split_layers` in-process to show the per-stage layers. GPipe (Huang et al. 2019, "GPipe:
Efficient Training of Giant Neural Networks using Pipeline Parallelism") cuts a stack of L layers
into p consecutive stages of ``layers_per_stage = L / p`` layers, splits the batch into m
micro-batches, runs all m forwards through the stages, then all m backwards in reverse. Each stage
idles for p - 1 of the m + p - 1 time slots, the *bubble* of Sec. 2.2.
"""

from __future__ import annotations


def split_layers(num_layers: int, num_stages: int) -> list[list[int]]:
    """Layer indices of each stage: stage s holds layers ``s*L/p .. (s+1)*L/p - 1``.

    >>> split_layers(8, 4)
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    """
    if num_stages < 1 or num_layers < 1:
        raise ValueError(
            f"need at least one layer and one stage, got L={num_layers}, p={num_stages}"
        )
    if num_layers % num_stages:
        raise ValueError(
            f"cannot split L={num_layers} layers into p={num_stages} pipeline stages: "
            f"L must be divisible by p (layers_per_stage = L / p = {num_layers / num_stages:g})"
        )
    per_stage = num_layers // num_stages  # layers_per_stage = L / p
    return [list(range(s * per_stage, (s + 1) * per_stage)) for s in range(num_stages)]


def bubble_fraction(num_stages: int, num_microbatches: int, chunks: int = 1) -> float:
    """Idle share of each stage's step: (p - 1) / (m + p - 1) for GPipe and 1F1B.

    With ``chunks`` = v model chunks per stage (interleaved 1F1B, Narayanan et al. 2021 §2.2) the
    bubble relative to ideal time is β = (p - 1) / (v·m), i.e. a share β / (1 + β) of the step;
    v = 1 gives the formula above.
    """
    p, m, v = num_stages, num_microbatches, chunks
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"need p >= 1, m >= 1 and v >= 1, got p={p}, m={m}, v={v}")
    return (p - 1) / (v * m + p - 1)  # = β / (1 + β) with β = (p - 1) / (v·m)


def gpipe_order(num_microbatches: int) -> list[str]:
    """The order in which every stage runs its work under GPipe: F0 .. F(m-1), then B(m-1) .. B0."""
    m = num_microbatches
    return [f"F{i}" for i in range(m)] + [f"B{i}" for i in reversed(range(m))]
