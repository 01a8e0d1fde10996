"""A chunked fused linear cross-entropy, written from the formula (Chapter 8, "The flagship run").

Used by :mod:`helpers.train.levers` (``--fused_ce chunked``). The last layer of a causal LM maps
each of n hidden vectors x_i (width h) to V logits z_i = W x_i and takes

    loss = (1/n_valid) · Σ_i [ log Σ_v exp(z_iv) − z_i,y_i ]      (i over targets ≠ ignore_index)
    ∂loss/∂z_i = (softmax(z_i) − onehot(y_i)) / n_valid,
    ∂loss/∂x_i = W^T ∂loss/∂z_i,    ∂loss/∂W = Σ_i ∂loss/∂z_i x_i^T.

With n = 16 × 2048 tokens and V = 32 000 the fp32 logits alone are n·V·4 B ≈ 4.2 GB, written once
and read several times (cast, log-softmax, its gradient). Here the rows go through in chunks of
``chunk_rows``: each chunk's logits live only inside the loop, and the gradients for x and W are
computed there, in the forward, so that nothing of size n·V is kept for the backward (which only
scales the stored gradients by the incoming one). Peak extra memory: one chunk's logits
(chunk_rows·V·4 B) plus an fp32 copy of ∂W (V·h·4 B).

Liger-Kernel's ``LigerFusedLinearCrossEntropyLoss`` (the maintained kernel the flagship also
measures) follows the same plan with Triton kernels for the softmax part; this version uses only
matmuls and torch elementwise ops, so it runs on the CPU too (tests compare it with
``F.cross_entropy(x @ W.T)``, forward and backward).
"""

from __future__ import annotations

import torch

IGNORE = -100  # the label Hugging Face's causal-LM loss ignores


def shifted_targets(labels: torch.Tensor, ignore_index: int = IGNORE) -> torch.Tensor:
    """Next-token targets of (b, s) labels as one (b·s,) vector: position t predicts label t+1, the
    last position of each row predicts nothing (``ignore_index``), as Hugging Face's loss pads."""
    pad = torch.full_like(labels[:, :1], ignore_index)
    return torch.cat([labels[:, 1:], pad], dim=1).reshape(-1)


class ChunkedLinearCE(torch.autograd.Function):
    """mean cross-entropy of ``x @ weight.T`` against ``targets``, gradients made chunk by chunk."""

    @staticmethod
    def forward(ctx, x, weight, targets, chunk_rows: int, ignore_index: int):
        n = x.shape[0]
        valid = targets != ignore_index
        acc = torch.promote_types(x.dtype, torch.float32)  # fp32 for bf16 inputs
        count = valid.sum().clamp(min=1).to(acc)  # stays on the device: no host sync
        grad_x = torch.empty_like(x)
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device)
        total = torch.zeros((), dtype=acc, device=x.device)
        for a in range(0, n, chunk_rows):
            xc, tc, ok = (
                x[a : a + chunk_rows],
                targets[a : a + chunk_rows],
                valid[a : a + chunk_rows],
            )
            logits = (xc @ weight.t()).to(acc)  # (c, V): the only n·V-sized thing, one chunk of it
            lse = torch.logsumexp(logits, dim=-1)
            safe = torch.where(ok, tc, torch.zeros_like(tc))
            picked = logits.gather(1, safe[:, None]).squeeze(1)
            total += ((lse - picked) * ok).sum()
            grad = logits.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
            grad[torch.arange(grad.shape[0], device=grad.device), safe] -= 1.0
            grad *= ok[:, None]
            grad = grad.to(x.dtype)
            grad_x[a : a + chunk_rows] = grad @ weight
            grad_w += (grad.t() @ xc).to(acc)
        ctx.save_for_backward(grad_x, grad_w, count)
        ctx.weight_dtype = weight.dtype
        return total / count

    @staticmethod
    def backward(ctx, grad_loss):
        grad_x, grad_w, count = ctx.saved_tensors
        scale = grad_loss / count
        return (
            grad_x * scale.to(grad_x.dtype),
            (grad_w * scale).to(ctx.weight_dtype),
            None,
            None,
            None,
        )


def chunked_linear_ce(
    x: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_rows: int = 4096,
    ignore_index: int = IGNORE,
) -> torch.Tensor:
    """Mean cross-entropy of the logits ``x @ weight.T`` (x: (n, h), weight: (V, h), targets: (n,))
    without ever holding all n·V logits; differentiable in ``x`` and ``weight``."""
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(
            f"x (n, h) and weight (V, h) expected, got {tuple(x.shape)}, {tuple(weight.shape)}"
        )
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be positive, got {chunk_rows}")
    return ChunkedLinearCE.apply(x, weight, targets, chunk_rows, ignore_index)


def logits_bytes(tokens: int, vocab: int, itemsize: int = 4) -> int:
    """Bytes of the logits of ``tokens`` positions over a ``vocab``-word vocabulary (fp32: 4)."""
    return tokens * vocab * itemsize


def ce_check(rows: int = 300, hidden: int = 64, vocab: int = 1000, chunk_rows: int = 64) -> dict:
    """Relative errors of :func:`chunked_linear_ce` against ``F.cross_entropy(x @ W.T)`` in float64
    on random data (a tenth of the targets ignored): the loss, ∂x and ∂W."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, hidden, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(vocab, hidden, generator=g, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, vocab, (rows,), generator=g)
    t[::10] = IGNORE
    out = {}
    for name, fn in (
        ("chunked", lambda: chunked_linear_ce(x, w, t, chunk_rows)),
        ("plain", lambda: torch.nn.functional.cross_entropy(x @ w.t(), t)),
    ):
        loss = fn()
        gx, gw = torch.autograd.grad(loss, (x, w))
        out[name] = (loss.detach(), gx, gw)
    (a, b) = out["chunked"], out["plain"]
    rel = [((p - q).norm() / q.norm()).item() for p, q in zip(a, b)]
    return dict(zip(("loss", "grad_x", "grad_w"), rel))
