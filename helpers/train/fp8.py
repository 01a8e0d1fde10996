"""FP8 training of the decoder's linear layers through ``torch._scaled_mm`` (Chapter 8, "FP8").

Used by :mod:`helpers.train.levers` (``--fp8 torch``) and Chapter 8's notebook. Each linear layer
keeps its bf16 weight; every call casts its input and weight to FP8 E4M3 with one scale per tensor
(``scale = 448 / max|t|``, the E4M3 maximum over the tensor's absolute maximum, recomputed every
call: "dynamic" scaling), multiplies on the FP8 tensor cores and writes bf16. The backward casts the
output gradient to E5M2 (more range, less precision) and runs the two gradient matmuls in FP8 too:

    y = x Wᵀ,   ∂x = ∂y W,   ∂W = ∂yᵀ x        (three FP8 matmuls per layer and step)

``torch._scaled_mm(a, b)`` wants ``a`` row-major and ``b`` column-major, so each gradient matmul
first transposes an FP8 copy: memory traffic that a bf16 matmul does not have, one reason the step
gains less than the 2× of the FP8 peak (1979 TFLOP/s dense on an H100/H200 SXM, datasheet).

:func:`colossal_fp8_failure` reproduces, on any device, why Colossal-AI 0.5.0's
``colossalai.quantization.fp8.linear_fp8`` fails under recent torch: ``_LinearFp8.forward``
(``colossalai/quantization/fp8.py:808``, and 822 and 830 in its backward) takes
``torch._scaled_mm(...)[0]``, written when the op returned a tuple ``(out, amax)``; since torch 2.5
it returns the output tensor alone, so ``[0]`` is the output's first row and the reshape that
follows fails.
"""

from __future__ import annotations

from functools import partial

import torch

E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max  # 448
E5M2_MAX = torch.finfo(torch.float8_e5m2).max  # 57344
H200_FP8_PEAK = 1978.9e12  # FLOP/s, dense FP8, NVIDIA H100/H200 SXM datasheet (2× bf16)


def to_fp8(t: torch.Tensor, dtype=torch.float8_e4m3fn) -> tuple[torch.Tensor, torch.Tensor]:
    """(FP8 tensor, inverse scale): ``t`` scaled so that its absolute maximum is the format's."""
    top = E4M3_MAX if dtype == torch.float8_e4m3fn else E5M2_MAX
    amax = t.detach().abs().max().float().clamp(min=1e-12)
    scale = top / amax
    return (t.float() * scale).clamp(-top, top).to(dtype), scale.reciprocal()


def _mm(a, a_inv, b, b_inv, out_dtype):
    """a (m, k) row-major × b (k, n) column-major in FP8, bf16 out."""
    return torch._scaled_mm(a, b, scale_a=a_inv, scale_b=b_inv, out_dtype=out_dtype)


class Fp8Linear(torch.autograd.Function):
    """y = x Wᵀ with FP8 operands (E4M3 forward, E5M2 output gradient), bf16 in and out."""

    @staticmethod
    def forward(ctx, x, weight):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        xq, x_inv = to_fp8(x2)
        wq, w_inv = to_fp8(weight)
        ctx.save_for_backward(xq, x_inv, wq, w_inv)
        ctx.shape, ctx.dtype = shape, x.dtype
        y = _mm(xq, x_inv, wq.t(), w_inv, x.dtype)  # wq (out, in) row-major: wq.t() column-major
        return y.reshape(*shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad_y):
        xq, x_inv, wq, w_inv = ctx.saved_tensors
        g = grad_y.reshape(-1, grad_y.shape[-1])
        gq, g_inv = to_fp8(g, torch.float8_e5m2)
        grad_x = _mm(gq, g_inv, wq.t().contiguous().t(), w_inv, ctx.dtype)  # (n, out) × (out, in)
        grad_w = _mm(gq.t().contiguous(), g_inv, xq.t().contiguous().t(), x_inv, ctx.dtype)
        return grad_x.reshape(ctx.shape), grad_w


def fp8_forward(linear: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """A bias-free linear layer's forward in FP8 (the weight stays the same Parameter)."""
    return Fp8Linear.apply(x, linear.weight)


def fp8_linears(module: torch.nn.Module) -> list[str]:
    """Route every bias-free ``nn.Linear`` inside ``module`` through :class:`Fp8Linear` (their
    forward replaced in place: optimizers and ZeRO's hooks keep the same parameters); returns the
    names changed. Dimensions must be multiples of 16 (``_scaled_mm``'s rule)."""
    names = []
    for name, m in module.named_modules():
        if isinstance(m, torch.nn.Linear) and m.bias is None:
            if m.in_features % 16 or m.out_features % 16:
                raise ValueError(
                    f"{name}: {m.in_features}×{m.out_features} is not a multiple of 16"
                )
            m.forward = partial(fp8_forward, m)
            names.append(name)
    return names


def colossal_fp8_failure(m: int = 64, k: int = 32, n: int = 48) -> str:
    """The error of Colossal-AI 0.5.0's FP8 linear (its autograd function, called eagerly) on bf16
    tensors x (m, k), w (n, k) under this torch, or "" when it runs."""
    from colossalai.quantization.fp8 import _LinearFp8

    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(m, k, dtype=torch.bfloat16, device=device)
    w = torch.randn(n, k, dtype=torch.bfloat16, device=device)
    try:
        _LinearFp8.apply(x, w, None)
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return ""


def scaled_mm_returns(device: str = "cpu") -> str:
    """What ``torch._scaled_mm`` returns under this torch: "tensor" or "tuple"."""
    a = torch.ones(16, 16, device=device).to(torch.float8_e4m3fn)
    one = torch.ones((), device=device)
    out = torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return "tuple" if isinstance(out, tuple) else "tensor"


def step_speedup(matmul_share: float, matmul_speedup: float) -> float:
    """Amdahl's law for a step: the whole step's speed-up when only its matmul share (of the time)
    runs ``matmul_speedup`` times faster."""
    if not 0 <= matmul_share <= 1 or matmul_speedup <= 0:
        raise ValueError("matmul_share in [0, 1] and a positive speed-up expected")
    return 1.0 / ((1 - matmul_share) + matmul_share / matmul_speedup)
