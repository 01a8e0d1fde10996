"""Model FLOPs utilisation (MFU): the compute-efficiency number of Chapters 9-11.

Used by Chapter 10 (pitfall: counting recomputation as useful work) and Chapter 11's numeric
questions. Training FLOPs per token of a decoder with Ψ parameters, L layers, hidden size h and
sequence length s (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models", §6 / Chowdhery et al. 2022, PaLM, appendix B):

    model FLOPs per token   = 6Ψ + 12·L·h·s      (forward 2Ψ + backward 4Ψ, plus attention scores)
    hardware FLOPs per token = model FLOPs × (1 + 1/3) with full activation recomputation
                               (the forward runs twice: 8Ψ instead of 6Ψ)

MFU = model FLOPs per second / peak FLOP/s of all GPUs; "HFU" uses the hardware FLOPs and is
larger whenever anything is recomputed. Peak: H100/H200 SXM dense bf16 989.5 TFLOP/s (datasheet).
"""

from __future__ import annotations

H200_BF16_PEAK = 989.5e12  # FLOP/s, dense bf16, NVIDIA H100/H200 SXM datasheet


def _positive(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


def flops_per_token(
    params: float, layers: int = 0, hidden: int = 0, seq_len: int = 0, recompute: bool = False
) -> float:
    """Training FLOPs per token: 6Ψ + 12·L·h·s, × 4/3 when ``recompute`` (hardware FLOPs).

    >>> flops_per_token(7e9) / 1e9
    42.0
    """
    _positive("params", params)
    for name, value in (("layers", layers), ("hidden", hidden), ("seq_len", seq_len)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    model = 6 * params + 12 * layers * hidden * seq_len
    return model * (4 / 3 if recompute else 1)


def mfu(
    tokens_per_s: float, flops_token: float, gpus: int, peak_flops: float = H200_BF16_PEAK
) -> float:
    """Utilisation = tokens/s × FLOPs per token / (GPUs × peak), a fraction in [0, 1] when sane.

    >>> round(mfu(1000, 42e9, 8, 989.5e12), 4)
    0.0053
    """
    _positive("tokens_per_s", tokens_per_s)
    _positive("flops_token", flops_token)
    _positive("peak_flops", peak_flops)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus must be a positive integer, got {gpus!r}")
    return tokens_per_s * flops_token / (gpus * peak_flops)
