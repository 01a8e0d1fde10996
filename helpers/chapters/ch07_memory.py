"""Chapter 7 (where the memory goes), section 2: the bytes autograd saves in one forward and loss
of a small Hugging Face Llama, counted by :func:`saved_bytes` and predicted term by term by
:func:`activation_formula`, which the notebook checks to the byte.
"""

from __future__ import annotations

import torch

from helpers.config.shape import ModelShape
from helpers.cost.census import count_saved_bytes
from helpers.cost.memory_llama import head_activation_bytes, layer_activation_bytes
from helpers.models.llama import build_llama


def saved_bytes(shape: ModelShape, ids: torch.Tensor, dtype: torch.dtype, attn: str) -> int:
    """What autograd saves (weights excluded, each storage once) when a Llama of ``shape`` in
    ``dtype`` with ``attn`` attention (``sdpa`` or ``eager``) runs forward and loss on ``ids``
    (b × s tokens, their own labels): :func:`helpers.cost.census.count_saved_bytes`."""
    model = build_llama(shape.config(attn=attn), dtype=dtype)
    return count_saved_bytes(model, {"input_ids": ids, "labels": ids})["total"]


def activation_formula(shape: ModelShape, b: int, s: int, e: int, attn: str) -> float:
    """The same bytes counted from the code that saves them, for b sequences of s tokens (N = b·s)
    at e bytes per element: each decoder layer (:func:`layer_activation_bytes`), the final RMSNorm
    (:func:`head_activation_bytes`), HF's fp32 log-softmax of the logits (4·N·v), the rotary cos
    and sin (2·s·d·e for head width d), the int64 ids and labels (16·N) and the fp32 loss (4)."""
    n, head_dim = b * s, shape.hidden // shape.heads
    return (
        shape.layers * layer_activation_bytes(shape, n, s, e, attn=attn)
        + head_activation_bytes(shape, n, e)
        + 4 * n * shape.vocab
        + 2 * s * head_dim * e
        + 16 * n
        + 4
    )
