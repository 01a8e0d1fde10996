"""The tuning knobs of Chapter 8's flagship run (:mod:`helpers.record.flagship`), one function each.

Used by :mod:`helpers.demos.ch08_train` (flags ``--compile``, ``--optim``, ``--plugin_kw``;
:mod:`helpers.train.framework_run`). Each knob is one change a reader can make to their own step,
measured one at a time on 2×H200:

* :func:`helpers.train.decoder.compile_layers` — ``torch.compile`` per decoder layer (the
granularity torchtitan uses):
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
* :func:`grad_norm_on_device` — LowLevelZero's ``step()`` computes the global gradient norm even
  when nothing is clipped, in fp64, one parameter at a time, and reads it on the host twice
  (``float()``, ``.item()``): the CPU waits for the whole backward before it launches the ~500
  small kernels of the step, and the GPU idles while it does. This keeps the norm a GPU tensor.
"""

from __future__ import annotations

import torch

from helpers.train import levers

OPTIMIZERS = ("hybrid_adam", "adamw", "adamw_fused")


def add_arguments(p) -> None:
    """The knobs' command-line flags (:mod:`helpers.demos.ch08_train`)."""
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder layer")
    p.add_argument(
        "--norm_on_device",
        action="store_true",
        help="LowLevelZero: keep the unused gradient norm on the GPU, no host sync in step()",
    )
    p.add_argument(
        "--optim", choices=OPTIMIZERS, default=None, help="default: hybrid_adam on GPUs, else adamw"
    )
    levers.add_arguments(p)
    p.add_argument(
        "--plugin_kw",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="extra plugin constructor kwargs, e.g. reduce_bucket_size_in_m=128 (repeatable)",
    )


def tune_boosted(model, optimizer, args, plugin_kw: dict) -> None:
    """Apply ``--compile`` and ``--norm_on_device`` to a model and optimizer a Colossal-AI plugin
    boosted.

    Compiling comes after boosting (shardformer's policies match the uncompiled module names); with
    ``overlap_allgather`` the all-gather waits then move to layer pre-hooks (Dynamo cannot trace
    Colossal-AI's tensor hook)."""
    levers.apply(model, args)  # compile (per layer or whole), SDPA backend, loss head, FP8
    if args.compile and plugin_kw.get("overlap_allgather"):
        wait_gathers_per_layer(model)
    if args.norm_on_device:
        grad_norm_on_device(optimizer)


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
    """``["reduce_bucket_size_in_m=128", "enable_async_reduce=False"]`` -> plugin constructor
    kwargs.

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
    """Make LowLevelZero's ``overlap_allgather`` work with :func:`compile_layers`; returns the hooks
    added.

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

    compiled = [
        m for m in model.modules() if isinstance(m, torch._dynamo.eval_frame.OptimizedModule)
    ]
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


def grad_norm_on_device(optimizer) -> None:
    """Remove the host syncs from a LowLevelZero ``step()`` that does not clip (``max_norm`` 0).

    Colossal-AI 0.5.0's ``LowLevelZeroOptimizer.step`` always calls ``_compute_grad_norm`` (each
    gradient shard cast to fp64, its norm, a Python sum, ``float()``, an all-reduce, ``.item()``)
    and ``calculate_global_norm_from_list`` (``math.sqrt``), then multiplies every gradient by
    ``1 / div_scale`` even when that is 1 (bf16 has no loss scale). Here the norm is one fused
    ``torch._foreach_norm`` in fp32 plus the same all-reduce, kept on the GPU
    (``optimizer.get_grad_norm()`` returns a 0-dim tensor), and the multiply by one is skipped. The
    update itself is unchanged, so the losses are too.
    """
    import torch.distributed as dist
    from colossalai.zero.low_level import low_level_optim

    if not hasattr(optimizer, "_compute_grad_norm") or not hasattr(
        optimizer, "_unscale_and_clip_grads"
    ):
        raise TypeError(f"not a LowLevelZero optimizer: {type(optimizer).__name__}")
    if optimizer._clip_grad_norm > 0:
        raise ValueError(
            "clipping compares the norm on the host (max_norm > 0): keep Colossal-AI's own step"
        )

    def compute(dp_pg, gradients, norm_type=2.0):
        if not gradients:
            return 0.0
        if float(norm_type) != 2.0:
            raise ValueError("grad_norm_on_device computes the 2-norm only")
        squares = (
            torch.stack(torch._foreach_norm(gradients, 2.0, dtype=torch.float32)).square().sum()
        )
        for group in dp_pg if isinstance(dp_pg, tuple) else (dp_pg,):
            dist.all_reduce(squares, op=dist.ReduceOp.SUM, group=group)
        return squares.sqrt()

    def unscale(grads, total_norm):
        mixin = optimizer.mixed_precision_mixin
        div_scale = mixin.get_grad_div_scale() if mixin is not None else 1.0
        if not (isinstance(div_scale, float) and div_scale == 1.0):
            torch._foreach_mul_(grads, 1.0 / div_scale)

    original = low_level_optim.calculate_global_norm_from_list
    if not getattr(original, "on_device", False):

        def global_norm(
            norm_list,
        ):  # the same sum of squares, without math.sqrt's host read of a tensor
            if not any(isinstance(n, torch.Tensor) for n in norm_list):
                return original(norm_list)
            return sum(n**2.0 for n in norm_list) ** 0.5 if norm_list else 0.0

        global_norm.on_device = True
        low_level_optim.calculate_global_norm_from_list = global_norm
    optimizer._compute_grad_norm = compute
    optimizer._unscale_and_clip_grads = unscale


def tune_plain(model, args) -> None:
    """The levers on a plain PyTorch model before FSDP2 wraps it (:mod:`helpers.train.levers`)."""
    if args.compile and args.compile_scope == "model":
        raise SystemExit("--compile_scope model is measured under Colossal-AI only")
    levers.apply(model, args)


def describe_levers(args) -> dict:
    """The levers of a run for its RESULT line (defaults when a caller's parser lacks them)."""
    return levers.describe(args) if hasattr(args, "sdpa") else {}
