"""Megatron-LM's two tensor-parallel operators, f and g, as autograd functions.

Used by Chapter 1's tensor-parallel demo (``helpers/demos/ch01_tp.py``) and shown in its notebook.
In Megatron-LM (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language
Models Using Model Parallelism", Fig. 3) an MLP ``Y = GeLU(X A) B`` is split as

* ``A`` by columns (column-parallel): rank r computes ``Y_r = GeLU(X A_r)`` with no communication,
* ``B`` by rows (row-parallel): rank r computes the partial sum ``Y_r B_r``; one all-reduce adds
  them.

The two conjugate operators around the block carry the communication:

* **f**: identity in the forward pass, all-reduce of the input gradient in the backward pass
  (every rank used the whole ``X``, so each holds only part of ``dL/dX``),
* **g**: all-reduce in the forward pass (sum the row-parallel partial outputs), identity in the
  backward pass (every rank already holds the whole ``dL/dY``).

One MLP forward and backward therefore costs exactly one all-reduce each way.

A :class:`CommClock` given to f and g (through :func:`mlp_block`) adds up the seconds spent inside
their all-reduces, or leaves them out for a step's compute alone (Chapter 5's mesh-order
measurement, ``helpers/demos/ch05_mesh_order.py``).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers.models.mlp import gelu_mlp


class CommClock:
    """Seconds inside the all-reduces it is given (gloo on the CPU blocks until a collective is
    done, so the wall time around the call is the collective's); with ``skip`` they are left out,
    so that the step's compute can be timed alone."""

    def __init__(self, skip: bool = False):
        self.skip, self.seconds = skip, 0.0

    def all_reduce(self, t: torch.Tensor, group) -> None:
        if self.skip:
            return
        start = time.perf_counter()
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        self.seconds += time.perf_counter() - start


def _all_reduce(t: torch.Tensor, group, clock: CommClock | None) -> None:
    if clock is None:
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
    else:
        clock.all_reduce(t, group)


# [start: f-and-g]
class CopyToTensorParallel(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce(SUM) backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group=None, clock: CommClock | None = None) -> torch.Tensor:
        ctx.group, ctx.clock = group, clock
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        _all_reduce(grad, ctx.group, ctx.clock)
        return grad, None, None


class ReduceFromTensorParallel(torch.autograd.Function):
    """Megatron's g: all-reduce(SUM) forward, identity backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group=None, clock: CommClock | None = None) -> torch.Tensor:
        out = x.contiguous().clone()
        _all_reduce(out, group, clock)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None, None


def f(x: torch.Tensor, group=None, clock: CommClock | None = None) -> torch.Tensor:
    """Enter a tensor-parallel region: identity now, all-reduce of the gradient later."""
    return CopyToTensorParallel.apply(x, group, clock)


def g(x: torch.Tensor, group=None, clock: CommClock | None = None) -> torch.Tensor:
    """Leave a tensor-parallel region: all-reduce the partial sums now, identity for the
    gradient."""
    return ReduceFromTensorParallel.apply(x, group, clock)
    # [end: f-and-g]


def shard(t: torch.Tensor, dim: int, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous 1/world_size slice of ``t`` along ``dim``, as a fresh tensor (a
    copy)."""
    if t.shape[dim] % world_size:
        raise ValueError(
            f"cannot split dimension {dim} of size {t.shape[dim]} into {world_size} equal shards"
        )
    return t.chunk(world_size, dim=dim)[rank].detach().clone()


# --- Megatron MLP blocks as plain tensors (Chapter 2's 3-D demo, helpers/demos/ch02_3d.py) ------


def mlp_blocks(layers: int, hidden: int, seed: int, device) -> list[dict[str, torch.Tensor]]:
    """Chapter 2's 3-D demo: an unsplit stack of Megatron MLP blocks in ``nn.Linear``'s (out, in)
    convention, as :func:`helpers.models.mlp.gelu_mlp`: w1 (4h, h) = A^T, b1 (4h,), w2 (h, 4h) =
    B^T, b2 (h,); the same on every rank."""
    gen = torch.Generator().manual_seed(seed)
    blocks = []
    for _ in range(layers):
        a = torch.randn(hidden, 4 * hidden, generator=gen) / hidden**0.5  # A (h, 4h)
        b1 = torch.randn(4 * hidden, generator=gen) * 0.1
        b = torch.randn(4 * hidden, hidden, generator=gen) / (4 * hidden) ** 0.5  # B (4h, h)
        b2 = torch.randn(hidden, generator=gen) * 0.1
        blocks.append({"w1": a.T.contiguous(), "b1": b1, "w2": b.T.contiguous(), "b2": b2})
    return [{k: v.to(device).requires_grad_() for k, v in blk.items()} for blk in blocks]


def mlp_block(x, p, group=None, clock: CommClock | None = None):
    """One MLP block ``x + GeLU(x W1^T + b1) W2^T + b2``; with ``group`` the tensor-parallel version
    (p holds this rank's shards), its f and g timed by ``clock`` if given."""
    if group is None:
        return x + gelu_mlp(x, p["w1"], p["b1"], p["w2"], p["b2"])
    partial = (
        F.gelu(f(x, group, clock) @ p["w1"].T + p["b1"]) @ p["w2"].T
    )  # (mb, h): this rank's share of the sum
    return x + g(partial, group, clock) + p["b2"]


def shard_mlp_blocks(
    blocks, layers: list[int], tp_rank: int, tp: int
) -> list[dict[str, torch.Tensor]]:
    """This rank's pieces: its stage's blocks, w1 and b1 by output rows (A by columns), w2 by input
    columns (B by rows), b2 whole."""
    return [
        {
            "w1": shard(blocks[i]["w1"], 0, tp_rank, tp).requires_grad_(),
            "b1": shard(blocks[i]["b1"], 0, tp_rank, tp).requires_grad_(),
            "w2": shard(blocks[i]["w2"], 1, tp_rank, tp).requires_grad_(),
            "b2": blocks[i]["b2"].detach().clone().requires_grad_(),
        }
        for i in layers
    ]
