"""Chapter 11's computed answers about memory, FLOPs and published runs: one named function each.

The interview bank (``helpers/data/interview/*.yaml``) names these functions as ``cost.<name>``
with keyword arguments, for example::

    compute: cost.model_state_bytes
    args: {params: 7.5e9, zero_stage: 1, dp: 64}

Each function calls the helper the book itself uses (:mod:`helpers.cost.memory`,
:mod:`helpers.cost.activations`, :mod:`helpers.cost.mfu`, :mod:`helpers.train.linear_ce`,
:mod:`helpers.train.fp8`, Chapter 12's published data) and returns the answer in base units:
bytes, FLOPs, parameters, a fraction or a ratio; the question's ``unit`` says how it is shown.
"""

from __future__ import annotations

from helpers.chapters.ch12_published import by_key
from helpers.cost.activations import layer_activations
from helpers.cost.hardware import A100_BF16_PEAK
from helpers.cost.memory import model_states, seed_estimate_memory
from helpers.cost.mfu import H200_BF16_PEAK, flops_per_token as _flops_per_token, mfu as _mfu
from helpers.cost.moe import moe_memory
from helpers.models.llama import llama_config
from helpers.train.fp8 import H200_FP8_PEAK, step_speedup
from helpers.train.linear_ce import logits_bytes as _logits_bytes
from helpers.train.presets import mfu as _preset_mfu

# --- memory


def seed_memory(params: float, tp: int = 1, pp: int = 1) -> float:
    """The guide's ``estimate_memory``: 16 bytes per parameter / (T·P), in bytes."""
    return seed_estimate_memory(params / 1e9, tp, pp) * 1e9


def model_state_bytes(
    params: float, zero_stage: int = 0, dp: int = 1, tp: int = 1, pp: int = 1
) -> float:
    """Weights, gradients and Adam states per GPU in mixed precision (bf16), ZeRO counted."""
    return sum(model_states(params, "bf16", zero_stage, dp=dp, tp=tp, pp=pp))


def layer_activation_bytes(
    s: int,
    b: int,
    h: int,
    a: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: bool = False,
) -> float:
    """Activation bytes one transformer layer keeps for backward, 16-bit (Korthikanti et al.)."""
    return layer_activations(s, b, h, a, tp, sequence_parallel, recompute)


def logits_bytes(positions: int, vocab: int) -> float:
    """Bytes of the fp32 logits of ``positions`` token positions over a vocabulary."""
    return _logits_bytes(positions, vocab)


# --- FLOPs and utilisation


def flops_per_token(
    params: float, layers: int = 0, hidden: int = 0, seq: int = 0, recompute: bool = False
) -> float:
    """Training FLOPs per token: 6Ψ (+ 12·L·h·s with attention; 8Ψ with recomputation)."""
    return _flops_per_token(params, layers, hidden, seq, recompute)


def recompute_flops_ratio(params: float) -> float:
    """Hardware FLOPs over model FLOPs with full recomputation."""
    return _flops_per_token(params, recompute=True) / _flops_per_token(params)


def mfu(tokens_per_s: float, params: float, gpus: int) -> float:
    """Model FLOPs utilisation of H200s (bf16 peak), 6Ψ per token."""
    return _mfu(tokens_per_s, _flops_per_token(params), gpus)


def flagship_mfu(tokens_per_s: float) -> float:
    """MFU of Chapter 8's 0.94 B Llama (16 layers, h = 2048, v = 32,000, s = 2048) on one H200,
    by the book's count (6Ψ_mm + 12·L·h·s per token)."""
    config = llama_config(16, 2048, 16, None, 32000, 2048)
    return _preset_mfu(config, 2048, tokens_per_s, 1)


def share_of_ceiling(mfu: float, ceiling_tflops: float) -> float:
    """An MFU against the H200's datasheet peak, as a share of a measured matmul ceiling."""
    return mfu * H200_BF16_PEAK / (ceiling_tflops * 1e12)


def amdahl_speedup(matmul_share: float, matmul_speedup: float) -> float:
    """The whole step's speed-up when only its matrix multiplies get faster."""
    return step_speedup(matmul_share, matmul_speedup)


def fp8_over_bf16_peak() -> float:
    """The H200's dense FP8 tensor-core peak over its dense bf16 peak."""
    return H200_FP8_PEAK / H200_BF16_PEAK


# --- published trainings (Chapter 12's data file)


def published_tokens_per_gpu_s(run: str) -> float:
    """Tokens per GPU-second from a run's reported GPU hours per 10¹² tokens."""
    hours = by_key(run).reported["H800 GPU hours per 1e12 tokens"]
    return 1e12 / (hours * 3600)


def active_params(run: str) -> float:
    """Parameters one token uses in a published mixture-of-experts model."""
    return by_key(run).model.active_params


def published_mfu_with_recompute(run: str) -> float:
    """MFU of an A100 run whose reported TFLOP/s counts the recomputed forward (four passes of
    work, of which the model's are three)."""
    return by_key(run).reported["TFLOP/s per GPU"] * 1e12 * 3 / 4 / A100_BF16_PEAK


def moe_active_params(
    dense_params: float, expert_params: float, experts: int, moe_layers: int, k: int
) -> float:
    """Parameters one token uses in a MoE model: all but the routed experts, and k of them per
    MoE layer (:func:`helpers.cost.moe.moe_memory`)."""
    return moe_memory(dense_params, expert_params, experts, moe_layers, k, dp=1, ep=1)[
        "active_params"
    ]
