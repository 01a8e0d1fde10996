"""Chapter 9's check of the vocabulary-parallel cross-entropy near zero loss: logits whose target
leads by a margin, and PyTorch's loss and target gradient on the whole logits to compare with.

Used by ``helpers/demos/ch09_dist_ce.py`` (section "The tp=2 bf16 NaN"). The exact target
gradient of the summed cross-entropy is p − 1, which rounds to 0 in bf16 once the margin is wide.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

VOCAB, TOKENS = 64, 4


def logits_with_margin(margin: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(TOKENS, VOCAB) logits whose target leads every other word by at least ``margin``."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(TOKENS, VOCAB, generator=g)
    target = torch.randint(0, VOCAB, (TOKENS,), generator=g)
    logits[torch.arange(TOKENS), target] = logits.max(dim=1).values + margin
    return logits, target


def torch_loss_and_target_grad(
    logits: torch.Tensor, target: torch.Tensor, dtype
) -> tuple[float, list[float]]:
    """PyTorch's summed cross-entropy in ``dtype`` and each token's gradient at its target."""
    x = logits.to(dtype).requires_grad_()
    loss = F.cross_entropy(x, target, reduction="sum")
    loss.backward()
    return loss.item(), x.grad[torch.arange(TOKENS), target].float().tolist()
