"""Chapter 9's from-scratch expert parallelism, checked: each rank's tokens and loss, and the
gradient bookkeeping that makes the parallel layer's gradients equal the single-process layer's.

Used by ``helpers/demos/ch09_moe.py`` with :mod:`helpers.parallel.ep`. The objective is the mean
of every rank's loss, as in data parallelism: the router, replicated on every rank, has its
gradient averaged over all ranks; an expert's gradient, which the all-to-all's backward has
already summed over the ep ranks whose tokens it served, is divided by ep (Colossal-AI's
EPGradScalerIn does the same) and averaged over its data group (:func:`average_grads`).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

AUX_WEIGHT = 0.01


def group_tokens(rank: int, tokens: int, hidden: int, skew: float) -> torch.Tensor:
    """This rank's tokens; ``skew`` > 0 shifts them along one direction so routing is
    unbalanced."""
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(tokens, hidden, generator=g)
    return x + skew * torch.ones(hidden) / hidden**0.5


def objective(out: torch.Tensor, aux: torch.Tensor, rank: int) -> torch.Tensor:
    """A loss with a different target per rank, so every gradient is non-trivial."""
    target = torch.randn(out.shape, generator=torch.Generator().manual_seed(2000 + rank))
    return ((out - target) ** 2).sum() + AUX_WEIGHT * aux


def reference_grads(layer, world_size: int) -> dict[str, torch.Tensor]:
    """The single-process layer's gradients of the mean loss: every rank's tokens are one GShard
    group, so the sum of the groups' gradients / world (a collective)."""
    grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    for g in grads.values():
        dist.all_reduce(g)
        g /= world_size
    return grads


def average_grads(router, experts, ep: int, dp: int, dp_group, world_size: int) -> None:
    """The parallel layer's gradients of the mean loss, in place: the router's averaged over all
    ranks; each expert weight's (summed over the ep group by the all-to-all) / ep, then averaged
    over its data group."""
    dist.all_reduce(router.grad)  # replicated on every rank: average over all of them
    router.grad /= world_size
    for w in experts:
        w.grad /= ep
        dist.all_reduce(w.grad, group=dp_group)
        w.grad /= dp
