"""The decoder layers of a Hugging Face Llama inside a plugin's wrappers: found, and compiled one by
one (the granularity torchtitan uses).

Used by Chapter 8's tuning knobs (:mod:`helpers.train.speed`), its levers
(:mod:`helpers.train.levers`) and the fused projections (:mod:`helpers.train.fused_proj`).
"""

from __future__ import annotations

import torch


def decoder_owner(model):
    """The module holding ``.model.layers`` (a Hugging Face CausalLM) inside a plugin's wrappers."""
    seen = model
    for _ in range(4):
        if hasattr(seen, "model") and hasattr(seen.model, "layers"):
            return seen
        seen = getattr(seen, "module", None)
        if seen is None:
            break
    raise TypeError(f"no decoder layers (.model.layers) found inside {type(model).__name__}")


def compile_layers(model, backend: str = "inductor", mode: str | None = None) -> int:
    """Replace each decoder layer by ``torch.compile(layer)`` in place; returns how many.

    The parameters stay the same objects (an ``OptimizedModule`` holds the original layer), so
    optimizers, ZeRO's gradient hooks and FSDP2's sharding built before or after see the same
    tensors; only the module tree gains an ``_orig_mod`` level (state-dict keys change).
    """
    layers = decoder_owner(model).model.layers
    for i, layer in enumerate(layers):
        layers[i] = torch.compile(layer, backend=backend, mode=mode)
    return len(layers)
