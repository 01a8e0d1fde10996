"""Checking a distributed result against a single-process reference computed inside the rank.

Used by the from-scratch demos of Chapter 1 (``helpers/demos/ch01_*.py``) and by later chapters
that check a parallel run against its unsplit twin. Every rank rebuilds the whole model from the
same seed, runs it on the whole batch on its own, and compares its shard of the parallel result
with the matching slice of that reference; a mismatch raises :class:`AssertionError` naming the
tensor, so a wrong split fails loudly instead of printing a plausible number.

The references themselves: :func:`train_reference` (AdamW on whole batches, Chapter 1, "the same
with Colossal-AI"), :func:`train_reference_mixed` (the same with Colossal-AI's mixed precision:
Chapters 1, 6, 8 and 9) and :func:`reference_adam_step` (unsharded Adam, Chapter 7's ZeRO-1).
:func:`loss_verdict` reads a run's losses (the ranks' mean, :func:`mean_losses`) against its
single-GPU reference: whether the run counts (Chapters 2, 6 and 8, the flagship).
"""

from __future__ import annotations

import copy
import math

import torch

from helpers.models.llama import shard_batch


def strict_fp32() -> None:
    """Turn off TF32 so CUDA matmuls are true fp32 and fp32 tolerances hold on GPUs too."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def tolerances(device: torch.device) -> dict[str, float]:
    """fp32 tolerances: tight on the CPU; a little looser on GPUs, where reductions reorder."""
    return dict(rtol=1e-5, atol=1e-5) if device.type == "cpu" else dict(rtol=1e-4, atol=1e-5)


def check_close(what: str, got: torch.Tensor, want: torch.Tensor) -> float:
    """Raise ``AssertionError`` if ``got`` differs from the reference ``want``; else return
    max |got - want|."""
    got, want = got.detach(), want.detach()
    tol = tolerances(got.device)
    # torch.allclose is assert_close's test (|got - want| <= atol + rtol * |want|) without its
    # 1.5 s first-call import of torch.distributed.tensor; assert_close then explains a failure.
    if got.shape != want.shape or got.dtype != want.dtype or not torch.allclose(got, want, **tol):
        try:
            torch.testing.assert_close(got, want, **tol)
        except AssertionError as err:
            raise AssertionError(
                f"{what} disagrees with the single-process reference:\n{err}"
            ) from None
    return float((got.float() - want.float()).abs().max()) if got.numel() else 0.0


def randn(*shape: int, seed: int, device: torch.device, scale: float = 1.0) -> torch.Tensor:
    """A seeded normal tensor drawn on the CPU, then moved: identical on every rank and device."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(device)


def global_max(value: float, device: torch.device) -> float:
    """The largest ``value`` over all ranks (a collective: every rank must call it)."""
    import torch.distributed as dist

    t = torch.tensor(
        [value], dtype=torch.float64 if device.type == "cpu" else torch.float32, device=device
    )
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits, for output that must not drift run to run."""
    return float(f"{x:.{digits}g}")


def train_reference(model, batches, lr):
    """AdamW on every whole batch in one process: the losses a data-parallel run must match."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for batch in batches:
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def train_reference_mixed(model, batches, lr, dtype, chunks: int = 1):
    """Mixed precision as Colossal-AI does it: fp32 master weights updated by AdamW, a 16-bit
    working copy for forward and backward, refreshed from the masters after every step.

    ``chunks`` > 1 accumulates each batch's gradient over that many equal slices of its rows (the
    memory of one slice; the same mean loss, since every sequence has the same number of
    labels)."""
    if dtype == torch.float32 and chunks == 1:
        return train_reference(model, batches, lr)
    work = copy.deepcopy(model).to(dtype) if dtype != torch.float32 else model
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for batch in batches:
        total = 0.0
        for k in range(chunks):
            loss = work(**shard_batch(batch, k, chunks)).loss / chunks
            loss.backward()
            total += loss.item()
        if work is not model:
            for master, w in zip(model.parameters(), work.parameters()):
                master.grad, w.grad = w.grad.float(), None
        opt.step()
        opt.zero_grad()
        if work is not model:
            with torch.no_grad():
                for master, w in zip(model.parameters(), work.parameters()):
                    w.copy_(master)
        losses.append(total)
    return losses


def reference_adam_step(params, m, v, steps, lr, betas, eps) -> None:
    """Unsharded Adam on every parameter: what ``torch.optim.Adam(params, lr, betas, eps).step()``
    runs.

    ``steps`` holds one step-count tensor per parameter, starting at 0: the function counts it up.
    """
    from torch.optim.adam import adam

    adam(
        params,
        [p.grad for p in params],
        m,
        v,
        [],
        steps,
        foreach=None,
        amsgrad=False,
        beta1=betas[0],
        beta2=betas[1],
        lr=lr,
        weight_decay=0.0,
        eps=eps,
        maximize=False,
    )


def mean_losses(results: list[dict]) -> list[float]:
    """The global loss per step: the mean over the ranks that report one (dp ranks, or the last
    stage)."""
    per_rank = [r["losses"] for r in results if r.get("losses")]
    steps = max((len(x) for x in per_rank), default=0)
    out = []
    for k in range(steps):
        vals = [x[k] for x in per_rank if k < len(x) and x[k] is not None]
        out.append(sum(vals) / len(vals) if vals else float("nan"))
    return out


def loss_verdict(results: list[dict], tolerance: float = 0.05) -> dict:
    """Whether a run's losses count: {'valid': bool, 'reason': str, 'max_ref_gap': float | None}.

    A run is invalid when its mean loss (over the ranks that report one) is not finite at some
    step, or departs from the single-GPU reference (same global batches, trained first on every
    rank) by more than ``tolerance`` at a step the reference covers. A fast run with a wrong loss
    measures nothing (Chapter 6's Gemini run: NaN from the third step on). Used by Chapters 6 and
    8's tables and the flagship benchmark (:mod:`helpers.record.flagship`).
    """
    mean = mean_losses(results)
    ref = next((r["reference"] for r in results if r.get("reference")), [])
    diffs = [abs(a - b) for a, b in zip(mean, ref)]
    finite = [d for d in diffs if math.isfinite(d)]
    gap = {"max_ref_gap": round(max(finite), 4) if finite else None}
    bad = next((k for k, x in enumerate(mean) if not math.isfinite(x)), None)
    if bad is not None:
        return {"valid": False, "reason": f"loss not finite from step {bad + 1} on", **gap}
    if diffs and max(diffs) > tolerance:
        return {
            "valid": False,
            "reason": f"loss departs from the reference by {max(diffs):.3f}",
            **gap,
        }
    return {
        "valid": True,
        "reason": f"within {tolerance} of the reference" if ref else "finite (no reference)",
        **gap,
    }
