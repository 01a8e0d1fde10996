"""Chapter 9's Llama presets and the book's one MFU for a Llama config.

The benchmark (``helpers/demos/ch09_hybrid.py``), the sequence-length sweep and Chapter 8's
framework comparison train these shapes. MFU (one definition for the whole book, in
:mod:`helpers.cost.mfu`): model FLOPs per token (6N + 12·L·h·s) × tokens/s / (GPUs × 989.5e12),
with N the parameters that do matrix multiplications (all but the input embedding table), L
layers, h hidden size, s sequence length; attention counted causal-unaware (PaLM, Chowdhery et al.
2022, App. B) and no recomputation; 989.5 TFLOP/s = H100/H200 dense bf16.
"""

from __future__ import annotations

from helpers.cost.mfu import flops_per_token as model_flops_per_token
from helpers.cost.mfu import mfu as book_mfu
from helpers.models.llama import llama_params

PRESETS = {  # name: llama_config kwargs
    "tiny": dict(layers=4, hidden=256, heads=8, vocab=128),
    "1b": dict(layers=16, hidden=2048, heads=16, vocab=32000),  # 0.94 B, Chapter 8's flagship
    "half": dict(layers=8, hidden=2048, heads=16, vocab=32000),  # 0.54 B
}


def flops_per_token(config, seq: int) -> float:
    """helpers.cost.mfu's 6N + 12·L·h·s with N = the parameters that do matmuls (all but the input
    embedding, which is a lookup)."""
    n = llama_params(config) - config.vocab_size * config.hidden_size
    return model_flops_per_token(n, config.num_hidden_layers, config.hidden_size, seq)


def mfu(config, seq: int, tokens_per_s: float, gpus: int) -> float:
    """The book's one MFU (helpers.cost.mfu.mfu) for a Llama config; 0 when nothing was
    measured."""
    return book_mfu(tokens_per_s, flops_per_token(config, seq), gpus) if tokens_per_s > 0 else 0.0
