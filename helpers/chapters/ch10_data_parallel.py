"""Chapter 10's pitfalls of data parallelism: the learning rate, the sampler, the token mean.

Each demo is an in-process computation in float64 (a linear regression trained by minibatch SGD,
PyTorch's ``DistributedSampler`` over a :class:`~helpers.parallel.mesh.RankMesh`, per-rank token
losses) that returns a :class:`~helpers.chapters.ch10_shown.Shown`.
"""

from __future__ import annotations

import torch
from torch.utils.data import DistributedSampler

from helpers.chapters.ch10_shown import Shown
from helpers.parallel.data_shard import data_sampler
from helpers.parallel.mesh import RankMesh


def _sgd_epoch(batch: int, lr: float, n: int = 1024, features: int = 16, seed: int = 0) -> float:
    """Mean-squared error after one epoch of minibatch SGD on a fixed linear-regression problem."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g, dtype=torch.float64)
    w_true = torch.randn(features, generator=g, dtype=torch.float64)
    y = x @ w_true + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    w = torch.zeros(features, dtype=torch.float64)
    for start in range(0, n, batch):
        xb, yb = x[start : start + batch], y[start : start + batch]
        w -= (
            lr * 2 * xb.T @ (xb @ w - yb) / batch
        )  # the mean gradient, as DDP's averaged all-reduce
    return float(((x @ w - y) ** 2).mean())


def lr_not_scaled(dp: int = 8, batch: int = 8, lr: float = 0.01) -> Shown:
    """Goyal et al. 2017, "Accurate, Large Minibatch SGD": global batch ×k → learning rate ×k."""
    one, same, scaled = (
        _sgd_epoch(batch, lr),
        _sgd_epoch(dp * batch, lr),
        _sgd_epoch(dp * batch, dp * lr),
    )
    return Shown(
        wrong=f"one epoch, 1 GPU (batch {batch}, lr {lr}): loss {one:.3f}; D={dp} (global batch "
        f"{dp * batch}), same lr: {dp}× fewer steps, loss {same:.3f}",
        fixed=f"lr × D = {dp * lr:g}: loss {scaled:.3f} (linear scaling rule; warm up for large D)",
        holds=same > 2 * one and abs(scaled - one) < 0.5 * one,
    )


def sampler_by_world(world: int = 4, tp: int = 2, samples: int = 8) -> Shown:
    """DistributedSampler over the world gives tensor-parallel peers different samples."""
    mesh = RankMesh.for_world(world, tp=tp)
    by_world = {
        r: list(DistributedSampler(range(samples), num_replicas=world, rank=r, shuffle=False))
        for r in range(world)
    }
    by_dp = {r: list(data_sampler(range(samples), mesh, r, shuffle=False)) for r in range(world)}
    group = mesh.group_of(0, "tp")
    return Shown(
        wrong=f"dp={mesh.dp}, tp={tp}: num_replicas=world gives tensor group {group} the samples "
        f"{[by_world[r] for r in group]}: the two halves of one layer see different inputs",
        fixed=f"num_replicas=dp, rank=dp_rank: {[by_dp[r] for r in group]} (the same samples in "
        "the group)",
        holds=len({tuple(by_world[r]) for r in group}) > 1
        and len({tuple(by_dp[r]) for r in group}) == 1,
    )


# [start: token-mean]
def token_mean(loss_sum: torch.Tensor, tokens: torch.Tensor, all_reduce_sum) -> torch.Tensor:
    """The loss per token over all ranks: sum the losses and the token counts over the ranks (one
    all-reduce of SUM on a pair), then divide. On ranks, ``all_reduce_sum`` is
    ``lambda t: (dist.all_reduce(t), t)[1]``."""
    both = all_reduce_sum(torch.stack([loss_sum, tokens.to(loss_sum.dtype)]))
    return both[0] / both[1]


# [end: token-mean]


def uneven_token_mean(counts: tuple[int, int] = (12, 36), seed: int = 0) -> Shown:
    """Averaging per-rank token means is not the global token mean when ranks hold different
    counts; :func:`token_mean` is, with the all-reduce played by a sum over the ranks."""
    g = torch.Generator().manual_seed(seed)
    per_rank = [
        torch.rand(c, generator=g, dtype=torch.float64) * (1 + r) for r, c in enumerate(counts)
    ]
    mean_of_means = sum(t.mean() for t in per_rank) / len(per_rank)
    global_mean = torch.cat(per_rank).mean()
    pairs = [torch.stack([t.sum(), torch.tensor(float(len(t)))]) for t in per_rank]
    fixed = token_mean(per_rank[0].sum(), torch.tensor(counts[0]), lambda _: sum(pairs))
    return Shown(
        wrong=f"token counts {list(counts)}: mean of the per-rank means "
        f"{float(mean_of_means):.4f}, true token mean {float(global_mean):.4f}",
        fixed=f"all-reduce (sum of losses, number of tokens), then divide: {float(fixed):.4f}",
        holds=bool(abs(mean_of_means - global_mean) > 0.05 and abs(fixed - global_mean) < 1e-12),
    )


def stable_rate_limit(n: int = 1024, features: int = 16, seed: int = 0) -> float:
    """2/λ_max of the regression's mean-squared loss (its Hessian is 2XᵀX/n): gradient descent on
    this quadratic converges only for learning rates below it."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g, dtype=torch.float64)
    return 2 / float(torch.linalg.eigvalsh(2 * x.T @ x / n).max())


def scaled_rate_losses(dps=(1, 64, 128), batch: int = 8, lr: float = 0.01) -> dict[int, float]:
    """Loss after one epoch with the linear scaling rule (learning rate × D) for each D."""
    return {dp: _sgd_epoch(dp * batch, dp * lr) for dp in dps}
