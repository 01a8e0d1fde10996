"""A small Mixtral for Chapter 9's expert-parallel demo: transformers' MixtralForCausalLM from a
config, random weights, nothing downloaded.

8 experts, top-2, eager attention; ``helpers/demos/ch09_mixtral.py`` trains it under
MoeHybridParallelPlugin (:mod:`helpers.train.moe_plugin`).
"""

from __future__ import annotations

import torch


def mixtral(layers: int, hidden: int, experts: int, vocab: int, seq: int, device):
    """(config, model): the same seeded weights on every rank, built on ``device``."""
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        num_local_experts=experts,
        num_experts_per_tok=2,
        max_position_embeddings=seq,
        tie_word_embeddings=False,
        attn_implementation="eager",
        use_cache=False,
        output_router_logits=False,
    )
    torch.manual_seed(0)
    with torch.device(device):
        return config, MixtralForCausalLM(config)


def expert_params(model) -> int:
    """Parameters of the experts (after sharding: this rank's share of them)."""
    return sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
