"""A tiny Llama-family model and a learnable synthetic token stream for the Colossal-AI demos.

Used by Chapter 1 ("the same with Colossal-AI") and later chapters' hybrid-parallel demos. Llama,
not GPT-2: under ``HybridParallelPlugin`` without flash attention, Colossal-AI 0.5.0's GPT-2
policy builds a padding mask that turns causal attention off (measured on two H200s), so GPT-2
would learn to copy the future. Nothing is downloaded: the model is built from a config and random
weights.

The data is fresh every step (never a repeated batch: a tp=2 run memorising one batch reached a
NaN loss, Chapter 9): each sequence is an arithmetic progression modulo the vocabulary with a
random start and stride, so the next token is predictable from the two before it and the loss
falls quickly. :class:`ProgressionDataset` is a fixed, finite set of such sequences (Chapter 5's
training loop: a run passes through epochs, and its position is something a checkpoint records).
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


def llama_config(
    layers: int = 4,
    hidden: int = 256,
    heads: int = 8,
    kv_heads: int | None = None,
    vocab: int = 512,
    max_seq: int = 1024,
    attn: str = "sdpa",
):
    """A small LlamaConfig (SwiGLU MLP of width ≈ 8/3·h rounded to 64, untied head).

    ``attn="eager"`` makes transformers build an explicit causal mask. Colossal-AI 0.5.0's
    sequence-parallel Llama attention (flash attention off) adds the mask it is given and
    nothing else; with ``"sdpa"`` and no padding transformers passes no mask at all, so that
    attention silently stops being causal (measured in Chapter 1's GPU table).
    """
    from transformers import LlamaConfig

    ffn = (8 * hidden // 3 + 63) // 64 * 64
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads or heads,
        max_position_embeddings=max_seq,
        tie_word_embeddings=False,
        attn_implementation=attn,
        use_cache=False,
    )


def build_llama(config, seed: int = 0, dtype: torch.dtype = torch.float32):
    """The same initial weights on every rank: seeded before construction."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(config).to(dtype)


def token_batch(
    step: int, batch: int, seq: int, vocab: int, seed: int = 1234
) -> dict[str, torch.Tensor]:
    """Global batch ``step``: {'input_ids', 'labels'} of shape (batch, seq), identical on all
    ranks."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    start = torch.randint(0, vocab, (batch, 1), generator=g)
    stride = torch.randint(1, 8, (batch, 1), generator=g)
    ids = (start + stride * torch.arange(seq)) % vocab  # (batch, seq)
    return {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}


def shard_batch(batch: dict[str, torch.Tensor], index: int, parts: int) -> dict[str, torch.Tensor]:
    """Rows ``index::parts`` of a global batch: what one data-parallel rank trains on."""
    rows = next(iter(batch.values())).shape[0]
    if rows % parts:
        raise ValueError(f"global batch {rows} does not split over {parts} data-parallel ranks")
    return {k: v[index::parts] for k, v in batch.items()}


def llama_params(config) -> int:
    """Parameter count of a Llama model from its config (Chapter 7's count: 4Lh² attention for MHA,
    3·L·h·ffn MLP, 2vh untied embeddings and head, 2h+1 norms per layer plus the final norm)."""
    h, L, v, f = (
        config.hidden_size,
        config.num_hidden_layers,
        config.vocab_size,
        config.intermediate_size,
    )
    kv = h * config.num_key_value_heads // config.num_attention_heads
    attention = 2 * h * h + 2 * h * kv
    return L * (attention + 3 * h * f + 2 * h) + h + 2 * v * h


class ProgressionDataset(Dataset):
    """``size`` fixed sequences (arithmetic progressions mod vocab,
    :func:`helpers.models.llama.token_batch`).

    A fixed, finite data set, so that a run passes through epochs and its position in the data
    (epoch, batch within the epoch) is something a checkpoint has to record.
    """

    def __init__(self, size: int, seq_len: int, vocab: int, seed: int = 0):
        self.ids = token_batch(0, size, seq_len, vocab, seed=seed + 1)["input_ids"]  # (size, seq)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}
