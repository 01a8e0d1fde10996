"""The tuning knobs of Chapter 8's flagship run (:mod:`helpers.flagship`), one function each.

Used by :mod:`helpers.demos.ch08_train` (flags ``--compile``, ``--optim``, ``--plugin_kw``). Each knob
is one change a reader can make to their own step, measured one at a time on 2×H200:

* :func:`compile_layers` — ``torch.compile`` per decoder layer (the granularity torchtitan uses):
  Inductor fuses the elementwise chain a Llama layer runs in eager mode (RMSNorm's fp32 upcast,
  RoPE, SiLU·mul, the residual adds) into a few Triton kernels. The causal mask is built outside
  the layers, so SDPA keeps its flash kernel (``is_causal=True``, no explicit mask).
* :func:`make_optimizer` — Colossal-AI's HybridAdam (a fused multi-tensor CUDA kernel, JIT-built)
  or PyTorch's AdamW (``foreach`` or ``fused``); LowLevelZero and FSDP2 accept any of them, Gemini
  only Colossal-AI's own.
* ``--plugin_kw reduce_bucket_size_in_m=128`` (:func:`plugin_kwargs`): LowLevelZero's default
  of 12 M elements splits a 0.94 B model's gradients into ~80 reduce-scatters; bigger buckets
  mean fewer, larger NCCL calls (the α term of Chapter 3's α-β model).
* :func:`wait_gathers_per_layer` — ``--plugin_kw overlap_allgather=True`` under ``--compile``:
  LowLevelZero then all-gathers the updated parameters asynchronously after ``step()`` and waits
  for each one just before it is used. Colossal-AI does the wait in a tensor-level hook (a
  ``ColoParameter.__torch_function__``) that ``torch.compile`` cannot trace; this moves the same
  wait to a forward pre-hook on each compiled layer, outside the graph.
"""

from __future__ import annotations

import torch

OPTIMIZERS = ("hybrid_adam", "adamw", "adamw_fused")


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


def compile_layers(model, backend: str = "inductor") -> int:
    """Replace each decoder layer by ``torch.compile(layer)`` in place; returns how many.

    The parameters stay the same objects (an ``OptimizedModule`` holds the original layer), so
    optimizers, ZeRO's gradient hooks and FSDP2's sharding built before or after see the same
    tensors; only the module tree gains an ``_orig_mod`` level (state-dict keys change).
    """
    layers = decoder_owner(model).model.layers
    for i, layer in enumerate(layers):
        layers[i] = torch.compile(layer, backend=backend)
    return len(layers)


def make_optimizer(name: str, params, lr: float, weight_decay: float = 0.01):
    """AdamW-equivalent optimizers by name (decoupled weight decay 0.01, AdamW's default)."""
    if name == "hybrid_adam":
        from colossalai.nn.optimizer import HybridAdam

        return HybridAdam(params, lr=lr, weight_decay=weight_decay, adamw_mode=True)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw_fused":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    raise ValueError(f"unknown optimizer {name!r}: one of {OPTIMIZERS}")


def plugin_kwargs(pairs: list[str] | None) -> dict:
    """``["reduce_bucket_size_in_m=128", "enable_async_reduce=False"]`` -> plugin constructor kwargs.

    Values are Python literals (numbers, True/False, None, strings in quotes); a bare word stays a
    string. The plugin's constructor rejects names it does not have."""
    import ast

    out = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--plugin_kw wants name=value, got {pair!r}")
        try:
            out[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[key] = text
    return out


def wait_gathers_per_layer(model) -> int:
    """Make LowLevelZero's ``overlap_allgather`` work with :func:`compile_layers`; returns the hooks added.

    With ``overlap_allgather=True`` the optimizer leaves one pending all-gather per parameter after
    ``step()`` (``zero_hook.set_all_gather_handle``) and the plugin turns every parameter into a
    ``ColoParameter`` whose ``__torch_function__`` waits before the first op that reads it. Dynamo
    cannot trace that hook, so a compiled layer fails. Here the parameters become plain
    ``nn.Parameter`` again (same objects, so the optimizer's maps still hold), the tensor-level hook
    is removed, and the same wait runs as a forward pre-hook: on each compiled layer's wrapper for
    all its parameters, and on every other module for the parameters it owns directly. The next
    forward still overlaps: layer i waits only for its own gathers while later ones are in flight.
    Call after :func:`compile_layers`.
    """
    from colossalai.tensor.colo_parameter import ColoParameter
    from colossalai.zero.low_level.zero_hook import ZeroOpHook, wait_all_gather_handle

    if not any(isinstance(h, ZeroOpHook) for h in getattr(model, "op_hooks", [])):
        raise ValueError("the model was not boosted by LowLevelZeroPlugin(overlap_allgather=True)")
    model.op_hooks = [h for h in model.op_hooks if not isinstance(h, ZeroOpHook)]
    for p in model.parameters():
        if type(p) is ColoParameter:
            p.__class__ = torch.nn.Parameter

    def waiter(params):
        def hook(module, args):
            for p in params:
                wait_all_gather_handle(p)
        return hook

    compiled = [m for m in model.modules() if isinstance(m, torch._dynamo.eval_frame.OptimizedModule)]
    inside = {id(m) for c in compiled for m in c.modules() if m is not c}
    hooks = 0
    for module in model.modules():
        if id(module) in inside:
            continue
        params = list(module.parameters(recurse=module in compiled))
        if params:
            module.register_forward_pre_hook(waiter(params))
            hooks += 1
    return hooks
