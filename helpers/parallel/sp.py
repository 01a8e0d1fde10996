"""Ulysses sequence parallelism's differentiable all-to-all, and plain causal attention.

Used by Chapter 1's sequence-parallel demo (``helpers/demos/ch01_sp.py``) and its notebook.
DeepSpeed-Ulysses (Jacobs et al. 2023, "DeepSpeed Ulysses: System Optimizations for Enabling
Training of Extreme Long Sequence Transformer Models", Sec. 3) keeps the activations split along
the sequence, ``(b, s/P, a, d)`` on each of P ranks, and before attention trades that for a split
along the heads, ``(b, s, a/P, d)``: every rank then sees the whole sequence for a subset of the
heads, which is all softmax attention needs. One all-to-all does the trade, and the inverse
all-to-all undoes it after attention. The backward of an all-to-all is the inverse all-to-all,
so :class:`AllToAll` passes gradients back the way the activations came.

Backend note (measured on torch 2.13 CPU, 2 and 4 processes): gloo implements both
``dist.all_to_all_single`` and ``dist.all_to_all`` for equal splits and returns the right blocks,
so no send/recv fallback is needed; NCCL implements both as well.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


# [start: all-to-all]
def all_to_all(x: torch.Tensor, scatter_dim: int, gather_dim: int, group=None) -> torch.Tensor:
    """Cut ``x`` into P pieces along ``scatter_dim``, send piece i to rank i, and concatenate the
    pieces received (from rank 0, 1, ..., P-1) along ``gather_dim``."""
    world = dist.get_world_size(group)
    if x.shape[scatter_dim] % world:
        raise ValueError(
            f"dimension {scatter_dim} of size {x.shape[scatter_dim]} "
            f"is not divisible by {world} ranks"
        )
    send = torch.stack(
        x.chunk(world, dim=scatter_dim)
    ).contiguous()  # (P, ..., n/P, ...): piece i for rank i
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # recv[j] is the piece rank j sent to us
    return torch.cat(recv.unbind(0), dim=gather_dim)


class AllToAll(torch.autograd.Function):
    """Differentiable all-to-all: the backward is the inverse all-to-all (dims swapped)."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, scatter_dim: int, gather_dim: int, group=None
    ) -> torch.Tensor:
        ctx.dims, ctx.group = (scatter_dim, gather_dim), group
        return all_to_all(x, scatter_dim, gather_dim, group)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        scatter_dim, gather_dim = ctx.dims
        return all_to_all(grad, gather_dim, scatter_dim, ctx.group), None, None, None


def seq_to_heads(x: torch.Tensor, group=None) -> torch.Tensor:
    """(b, s/P, a, d) -> (b, s, a/P, d): whole sequence, this rank's group of heads."""
    return AllToAll.apply(x, 2, 1, group)


def heads_to_seq(x: torch.Tensor, group=None) -> torch.Tensor:
    """(b, s, a/P, d) -> (b, s/P, a, d): back to this rank's tokens, all heads."""
    return AllToAll.apply(x, 1, 2, group)
    # [end: all-to-all]


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + causal mask) v per head, on (b, s, heads, d) tensors."""
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (b, heads, s, d)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (b, heads, s, s)
    s = scores.shape[-1]
    future = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    out = scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v  # (b, heads, s, d)
    return out.transpose(1, 2)  # (b, s, heads, d)
