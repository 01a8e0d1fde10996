"""The small fp32 models the from-scratch demos split by hand.

Chapter 1, "the four ways to split the work": :func:`tiny_mlp` is way 1's model (and Chapter 7's
ZeRO-1 model), :func:`gelu_mlp` way 2's transformer MLP, :func:`tanh_blocks` way 3's stack of
blocks (and Chapter 10's pipeline-loss pitfall). Each is built from a seed, so every rank holds
the same weights as the single-process reference it is checked against.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def tiny_mlp(hidden: int, seed: int, device: torch.device) -> nn.Module:
    """h -> 4h -> 1 with tanh, seeded: identical replicas on every rank."""
    torch.manual_seed(seed)  # the same seed on every rank: identical replicas
    return nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.Tanh(), nn.Linear(4 * hidden, 1)).to(
        device
    )


def gelu_mlp(x, w1, b1, w2, b2):
    """The unsplit transformer MLP ``GeLU(x W1^T + b1) W2^T + b2`` (and, with shards, one rank's
    part of it)."""
    return F.gelu(x @ w1.T + b1) @ w2.T + b2


def tanh_blocks(num_layers: int, hidden: int, seed: int, device: torch.device) -> nn.ModuleList:
    """``num_layers`` blocks of Linear(h, h) + tanh, seeded: stage r's blocks equal the
    reference's."""
    torch.manual_seed(seed)  # the same seed on every rank: stage r's layers equal the reference's
    return nn.ModuleList(
        nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh()) for _ in range(num_layers)
    ).to(device)


def run_blocks(layers, x):
    """``x`` through ``layers`` in order."""
    for layer in layers:
        x = layer(x)
    return x
