"""Pipeline-parallel bookkeeping: which layers each stage holds, and how idle the GPipe schedule is.

Used by Chapter 1's pipeline demo (``helpers/demos/ch01_pp.py``) and its notebook, which calls
:func:`split_layers` in-process to show the per-stage layers. GPipe (Huang et al. 2019, "GPipe:
Efficient Training of Giant Neural Networks using Pipeline Parallelism") cuts a stack of L layers
into p consecutive stages of ``layers_per_stage = L / p`` layers, splits the batch into m
micro-batches, runs all m forwards through the stages, then all m backwards in reverse. Each stage
idles for p - 1 of the m + p - 1 time slots, the *bubble* of Sec. 2.2. :func:`bubble_fraction` is
the book's one bubble formula, for every schedule of Chapter 1 (:mod:`helpers.parallel.pp_schedules`
simulates them), exact or as text (:func:`bubble_text`) where a page shows the fraction;
:func:`gpipe_order` is GPipe's one order, and :func:`gpipe_step` runs it on a stage with autograd.
"""

from __future__ import annotations

from fractions import Fraction

import torch
import torch.distributed as dist


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


# the bubble of each schedule as the book writes it (P stages, m micro-batches, c model chunks)
BUBBLE_FORMULAS = {
    "gpipe": "(P-1)/(m+P-1)",
    "1f1b": "(P-1)/(m+P-1)",
    "interleaved": "(P-1)/(c·m+P-1)",
    "zb-h1": "(P-1)/(3m+P-1)",
}


def bubble_fraction(
    num_stages: int,
    num_microbatches: int,
    chunks: int = 1,
    schedule: str = "1f1b",
    t_f: float = 1.0,
    t_b: float = 1.0,
    t_w: float = 1.0,
    exact: bool = False,
) -> float | Fraction:
    """Idle share of each stage's step, the one formula of the book's pipeline bubble.

    GPipe and 1F1B: (p - 1) / (m + p - 1). With ``chunks`` = v model chunks per stage (interleaved
    1F1B, Narayanan et al. 2021 §2.2) the bubble relative to ideal time is β = (p - 1) / (v·m),
    i.e. a share β / (1 + β) of the step; v = 1 gives the formula above. ZB-H1 (``schedule``
    "zb-h1"): an idle time of (p - 1)(t_f + t_b - t_w) per stage (Qi et al. 2024, §3.1) beside
    m(t_f + t_b + t_w) of work, for per-micro-batch costs t_f (forward), t_b (input gradient) and
    t_w (weight gradient); (p - 1)/(3m + p - 1) when the three are equal. ``exact``: the share as
    a :class:`fractions.Fraction` (whole costs).
    """
    p, m, v = num_stages, num_microbatches, chunks
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"need p >= 1, m >= 1 and v >= 1, got p={p}, m={m}, v={v}")
    if schedule not in BUBBLE_FORMULAS:
        raise ValueError(f"no bubble formula for {schedule!r}; known: {', '.join(BUBBLE_FORMULAS)}")
    if schedule == "zb-h1":
        if exact:
            t_f, t_b, t_w = Fraction(t_f), Fraction(t_b), Fraction(t_w)
        idle = (p - 1) * (t_f + t_b - t_w)
        return idle / (m * (t_f + t_b + t_w) + idle)
    if exact:
        return Fraction(p - 1, v * m + p - 1)
    return (p - 1) / (v * m + p - 1)  # = β / (1 + β) with β = (p - 1) / (v·m)


def bubble_text(schedule: str, p: int, m: int, v: int = 1) -> tuple[Fraction | None, str]:
    """The bubble of ``schedule`` as an exact fraction and the formula that gives it
    ("(P-1)/(m+P-1) = 3/11"), or (None, why) for a schedule without a closed form (ZB-V)."""
    if schedule not in BUBBLE_FORMULAS:
        return None, "no closed form"
    value = bubble_fraction(p, m, v if schedule == "interleaved" else 1, schedule, exact=True)
    return value, f"{BUBBLE_FORMULAS[schedule]} = {value.numerator}/{value.denominator}"


def gpipe_order(num_microbatches: int) -> list[str]:
    """The order in which every stage runs its work under GPipe: F0 .. F(m-1), then B(m-1) .. B0.

    The one definition of GPipe's order: :func:`gpipe_step` runs it, and Chapter 1's schedules
    (:func:`helpers.parallel.pp_schedules.gpipe`) simulate it."""
    m = num_microbatches
    return [f"F{i}" for i in range(m)] + [f"B{i}" for i in reversed(range(m))]


def gpipe_step(stage, xs: list, ys: list, loss, prev: int | None, nxt: int | None):
    """GPipe on one stage with autograd, in :func:`gpipe_order`: each micro-batch's forward
    (its input received from rank ``prev``, its output sent to rank ``nxt``), then each backward,
    last micro-batch first (the output's gradient received from ``nxt``, the input's sent to
    ``prev``). ``stage(x)`` runs this stage's layers; the last stage (``nxt`` None) adds
    ``loss(out, y) / m`` per micro-batch and returns their sum (the batch's mean loss), every other
    stage None. Chapter 2's 3-D grid (:func:`helpers.train.grid3d.pipeline_step`)."""
    inputs, outputs, losses = [], [], []
    for step in gpipe_order(len(xs)):
        i = int(step[1:])
        if step[0] == "F":
            if prev is None:
                inp = xs[i]
            else:
                inp = torch.empty_like(xs[i])
                dist.recv(inp, src=prev)  # (mb, h) from the previous stage
                inp.requires_grad_()
            out = stage(inp)
            if nxt is None:
                losses.append(loss(out, ys[i]) / len(xs))
            else:
                dist.send(out.detach().contiguous(), dst=nxt)
            inputs.append(inp)
            outputs.append(out)
            continue
        if nxt is None:
            losses[i].backward()
        else:
            grad = torch.empty_like(outputs[i])
            dist.recv(grad, src=nxt)
            outputs[i].backward(grad)
        if prev is not None:
            dist.send(inputs[i].grad.contiguous(), dst=prev)
    return torch.stack(losses).sum().detach() if nxt is None else None
