"""Megatron-LM's two tensor-parallel operators, f and g, as autograd functions.

Used by Chapter 1's tensor-parallel demo (``helpers/demos/ch01_tp.py``) and shown in its notebook.
In Megatron-LM (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language
Models Using Model Parallelism", Fig. 3) an MLP ``Y = GeLU(X A) B`` is split as

* ``A`` by columns (column-parallel): rank r computes ``Y_r = GeLU(X A_r)`` with no communication,
* ``B`` by rows (row-parallel): rank r computes the partial sum ``Y_r B_r``; one all-reduce adds them.

The two conjugate operators around the block carry the communication:

* **f**: identity in the forward pass, all-reduce of the input gradient in the backward pass
  (every rank used the whole ``X``, so each holds only part of ``dL/dX``),
* **g**: all-reduce in the forward pass (sum the row-parallel partial outputs), identity in the
  backward pass (every rank already holds the whole ``dL/dY``).

One MLP forward and backward therefore costs exactly one all-reduce each way.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


class CopyToTensorParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce(SUM) backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group=None) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None


class ReduceFromTensorParallel(torch.autograd.Function):
    """Megatron's g: all-reduce(SUM) forward, identity backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group=None) -> torch.Tensor:
        out = x.contiguous().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


def f(x: torch.Tensor, group=None) -> torch.Tensor:
    """Enter a tensor-parallel region: identity now, all-reduce of the gradient later."""
    return CopyToTensorParallel.apply(x, group)


def g(x: torch.Tensor, group=None) -> torch.Tensor:
    """Leave a tensor-parallel region: all-reduce the partial sums now, identity for the gradient."""
    return ReduceFromTensorParallel.apply(x, group)


def shard(t: torch.Tensor, dim: int, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous 1/world_size slice of ``t`` along ``dim``, as a fresh tensor (a copy)."""
    if t.shape[dim] % world_size:
        raise ValueError(
            f"cannot split dimension {dim} of size {t.shape[dim]} into {world_size} equal shards"
        )
    return t.chunk(world_size, dim=dim)[rank].detach().clone()
