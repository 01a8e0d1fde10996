"""Fused input projections: one matmul for q, k and v, one for the MLP's gate and up (Chapter 8,
"Levers").

Used by :mod:`helpers.train.framework_run` (``--fuse_proj``, a lever of :mod:`helpers.train.levers`)
before the model is boosted or sharded. A Hugging Face Llama layer multiplies the same normalised
input by three matrices for attention (q, k, v: each h × h here) and by two for the MLP (gate and
up: h × ffn). Stacking each set's weights gives one wider matrix and one matmul:

    [q | k | v] = x · [W_q | W_k | W_v]ᵀ        [g | u] = x · [W_g | W_u]ᵀ

The function and its gradients are the same (the tests compare both with the unfused layer); what
changes is the shape of the work. Forward, one (n × h)·(h × 3h) product instead of three of
width h; backward, ∂x comes out of one product over 3h instead of three products and two adds,
and ∂W out of one product. Megatron-LM stores its attention input projection this way
(``linear_qkv``) and its gated MLP's first layer too (``linear_fc1`` with ``gated_linear_unit``).

Training only: a KV cache (``past_key_value``) is refused. The state-dict keys change
(``qkv_proj``, ``gate_up_proj``), so a checkpoint of a fused model loads only into a fused model.
"""

from __future__ import annotations

from functools import cache

import torch
from torch import nn
from helpers.train.decoder import decoder_owner


def _stacked(linears: list[nn.Linear]) -> nn.Linear:
    """One Linear whose output is the outputs of ``linears`` side by side (same input)."""
    first = linears[0]
    bias = first.bias is not None
    out = nn.Linear(
        first.in_features,
        sum(m.out_features for m in linears),
        bias=bias,
        device=first.weight.device,
        dtype=first.weight.dtype,
    )
    with torch.no_grad():
        out.weight.copy_(torch.cat([m.weight for m in linears]))
        if bias:
            out.bias.copy_(torch.cat([m.bias for m in linears]))
    return out


@cache  # one class per base: identical layers keep one compiled graph (Dynamo guards on types)
def _attention_class(base: type) -> type:
    """``base`` (a Hugging Face Llama attention class) with q, k, v from one ``qkv_proj``."""
    from transformers.models.llama import modeling_llama as hf

    class FusedQKVAttention(base):
        def forward(self, hidden_states, position_embeddings, attention_mask, **kwargs):
            if kwargs.get("past_key_value") is not None:
                raise ValueError("fused q/k/v projections are for training: no KV cache")
            kwargs.pop("past_key_value", None)
            kwargs.pop("cache_position", None)
            shape = (*hidden_states.shape[:-1], -1, self.head_dim)
            q, k, v = self.qkv_proj(hidden_states).split(self.qkv_sizes, dim=-1)
            q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
            q, k = hf.apply_rotary_pos_emb(q, k, *position_embeddings)
            attend = hf.eager_attention_forward
            if self.config._attn_implementation != "eager":
                attend = hf.ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
            out, weights = attend(
                self,
                q,
                k,
                v,
                attention_mask,
                dropout=self.attention_dropout if self.training else 0.0,
                scaling=self.scaling,
                **kwargs,
            )
            out = out.reshape(*hidden_states.shape[:-1], -1).contiguous()
            return self.o_proj(out), weights

    return FusedQKVAttention


@cache
def _mlp_class(base: type) -> type:
    """``base`` (a Hugging Face Llama MLP class) with gate and up from one ``gate_up_proj``."""

    class FusedGateUpMLP(base):
        def forward(self, x):
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(self.act_fn(gate) * up)

    return FusedGateUpMLP


def fuse_layer(layer) -> None:
    """Fuse one decoder layer's q/k/v and gate/up projections in place."""
    attn, mlp = layer.self_attn, layer.mlp
    parts = [attn.q_proj, attn.k_proj, attn.v_proj]
    attn.qkv_sizes = [m.out_features for m in parts]
    attn.qkv_proj = _stacked(parts)
    del attn.q_proj, attn.k_proj, attn.v_proj
    attn.__class__ = _attention_class(type(attn))
    mlp.gate_up_proj = _stacked([mlp.gate_proj, mlp.up_proj])
    del mlp.gate_proj, mlp.up_proj
    mlp.__class__ = _mlp_class(type(mlp))


def fuse_projections(model) -> int:
    """Fuse every decoder layer of a Hugging Face Llama (``model.model.layers``) before it is
    boosted or sharded; returns how many layers."""
    layers = decoder_owner(model).model.layers
    for layer in layers:
        if not hasattr(layer.self_attn, "q_proj") or not hasattr(layer.mlp, "gate_proj"):
            raise TypeError(
                f"{type(layer).__name__} has no q_proj/gate_proj: already fused, or not a Llama"
            )
        fuse_layer(layer)
    return len(layers)
