"""One flat fp32 buffer for all weights and one for all gradients, the model's tensors views of
them: the storage of Chapter 7's from-scratch ZeRO-1.

Used by ``helpers/demos/ch07_zero1.py``. The buffers are padded to ``padded`` elements (a multiple
of the data-parallel size, :func:`helpers.parallel.zero.flat_layout`), so that a reduce-scatter
hands every rank one equal slice; ``.grad`` of every parameter is a view into the gradient
buffer, so backward accumulates into it in place.
"""

from __future__ import annotations

import torch


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def offsets(params: list[torch.Tensor]) -> list[int]:
    """Where each parameter starts in the flat buffers."""
    out, o = [], 0
    for p in params:
        out.append(o)
        o += p.numel()
    return out


def flat_buffers(params: list[torch.Tensor], padded: int, device) -> tuple[torch.Tensor, ...]:
    """(weights, gradients), each ``(padded,)`` fp32; the parameters' data and ``.grad`` become
    views of them (the padding stays zero)."""
    flat_w = torch.zeros(padded, dtype=torch.float32, device=device)  # (N·s,) all weights
    flat_g = torch.zeros_like(flat_w)  # (N·s,) all gradients
    for p, o in zip(params, offsets(params)):
        n = p.numel()
        flat_w[o : o + n].copy_(p.detach().flatten())
        p.data = flat_w[o : o + n].view_as(p)
        p.grad = flat_g[o : o + n].view_as(p)  # backward accumulates into flat_g in place
    return flat_w, flat_g


def check_grad_views(params: list[torch.Tensor], flat_g: torch.Tensor) -> None:
    """Raise if autograd replaced a ``.grad`` view by a tensor of its own."""
    if any(
        p.grad.data_ptr() != flat_g.data_ptr() + flat_g.element_size() * o
        for p, o in zip(params, offsets(params))
    ):
        raise RuntimeError(
            "autograd replaced a .grad view: the gradients no longer live in the flat buffer"
        )
