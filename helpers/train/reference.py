"""Checking a distributed result against a single-process reference computed inside the rank.

Used by the from-scratch demos of Chapter 1 (``helpers/demos/ch01_*.py``) and by later chapters
that check a parallel run against its unsplit twin. Every rank rebuilds the whole model from the
same seed, runs it on the whole batch on its own, and compares its shard of the parallel result
with the matching slice of that reference; a mismatch raises :class:`AssertionError` naming the
tensor, so a wrong split fails loudly instead of printing a plausible number.
"""

from __future__ import annotations

import torch


def strict_fp32() -> None:
    """Turn off TF32 so CUDA matmuls are true fp32 and fp32 tolerances hold on GPUs too."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def tolerances(device: torch.device) -> dict[str, float]:
    """fp32 tolerances: tight on the CPU; a little looser on GPUs, where reductions reorder."""
    return dict(rtol=1e-5, atol=1e-5) if device.type == "cpu" else dict(rtol=1e-4, atol=1e-5)


def check_close(what: str, got: torch.Tensor, want: torch.Tensor) -> float:
    """Raise ``AssertionError`` if ``got`` differs from the reference ``want``; else return max |got - want|."""
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
