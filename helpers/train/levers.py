"""The flagship's levers beyond :mod:`helpers.train.speed`: one flag each (Chapter 8, "Levers").

Used by :mod:`helpers.train.framework_run` (so by :mod:`helpers.demos.ch08_train`), measured one row
per lever by :mod:`helpers.record.flagship_levers` on one H200:

* ``--sdpa cudnn|flash|efficient|math`` — which kernel ``F.scaled_dot_product_attention`` may use
  (:func:`set_sdpa_backend`: the other backends are switched off for the whole process, so a
  backend that cannot run the call fails loudly instead of falling back).
* ``--fused_ce liger|chunked|plain`` — the loss head (:func:`use_loss`): the decoder's last hidden
  states go to Liger-Kernel's fused linear cross-entropy, to the book's chunked version
  (:mod:`helpers.train.linear_ce`), or to ``lm_head`` + fp32 ``F.cross_entropy`` as Hugging Face
  does. Each keeps Hugging Face's next-token targets and mean over the tokens.
* ``--compile_scope layer|model`` and ``--compile_mode`` — per-decoder-layer ``torch.compile``
  (:func:`helpers.train.decoder.compile_layers`) or the whole decoder stack as one graph, in
  Inductor's default mode, ``max-autotune-no-cudagraphs`` or ``reduce-overhead`` (CUDA graphs).
* ``--recompute_layers K`` — activation recomputation of the first K decoder layers only
  (a layer-selective recompute that lets a larger micro-batch fit).
* ``--fp8 torch`` — the decoder's linear layers in FP8 through ``torch._scaled_mm``
  (:mod:`helpers.train.fp8`).
* ``--fuse_proj`` — one matmul for q, k, v and one for gate and up
  (:mod:`helpers.train.fused_proj`); it changes the parameters, so :func:`before_wrapping` applies
  it before the plugin or FSDP2 sees them, after the reference has trained its copy.

The whole-model path drops the all-ones ``attention_mask``: traced by Dynamo, transformers 4.51
would turn it into an explicit 4-D mask and SDPA would lose its causal kernels.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch
from helpers.train.linear_ce import chunked_linear_ce, shifted_targets
from helpers.train.decoder import compile_layers, decoder_owner
from helpers.train.fp8 import fp8_linears
from helpers.train.fused_proj import fuse_projections

SDPA = ("default", "cudnn", "flash", "efficient", "math")
# how each SDPA backend's CUDA kernels are named in a profile (torch 2.11, sm90)
SDPA_KERNELS = {
    "cudnn": "cudnn_generated_fort_native_sdpa",
    "flash": "pytorch_flash::",
    "efficient": "fmha_cutlass",
}
LOSSES = ("hf", "plain", "liger", "chunked")
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead")


def add_arguments(p) -> None:
    """The levers' command-line flags."""
    p.add_argument("--sdpa", choices=SDPA, default="default", help="the only SDPA backend allowed")
    p.add_argument(
        "--fused_ce", choices=LOSSES, default="hf", help="the loss head (hf: the model's own)"
    )
    p.add_argument(
        "--ce_chunk", type=int, default=4096, help="rows per chunk of --fused_ce chunked"
    )
    p.add_argument("--compile_scope", choices=("layer", "model"), default="layer")
    p.add_argument("--compile_mode", choices=COMPILE_MODES, default="default")
    p.add_argument("--recompute_layers", type=int, default=0, help="recompute the first K layers")
    p.add_argument("--fp8", choices=("none", "torch"), default="none")
    p.add_argument(
        "--fuse_proj", action="store_true", help="one matmul for q/k/v and one for gate/up"
    )
    p.add_argument("--trace", action="store_true", help="keep the profiled step's kernel timeline")
    p.add_argument(
        "--memory_snapshot", action="store_true", help="one more step under the allocator's trace"
    )


def describe(args) -> dict:
    """The levers of a run, as its RESULT line reports them."""
    return dict(
        sdpa=args.sdpa,
        fused_ce=args.fused_ce,
        compile_scope=args.compile_scope if args.compile else None,
        compile_mode=args.compile_mode if args.compile else None,
        recompute_layers=args.recompute_layers,
        fp8=args.fp8,
        fuse_proj=getattr(args, "fuse_proj", False),
    )


def set_sdpa_backend(name: str) -> None:
    """Allow only backend ``name`` for SDPA from now on (``default``: leave torch's choice)."""
    if name == "default":
        return
    b = torch.backends.cuda
    b.enable_cudnn_sdp(name == "cudnn")
    b.enable_flash_sdp(name == "flash")
    b.enable_mem_efficient_sdp(name == "efficient")
    b.enable_math_sdp(name == "math")


def separate_compile_cache(backend: str) -> str:
    """Give compiled graphs made under SDPA setting ``backend`` their own Inductor cache folder
    (``TORCHINDUCTOR_CACHE_DIR``/``sdpa-<backend>``); returns it.

    Inductor's on-disk caches key a graph on its code and inputs but not on
    ``torch.backends.cuda.enable_*_sdp``: on one H200 (torch 2.11) a process that allowed only
    the memory-efficient kernels, started after one that allowed only flash, loaded the cached
    graph and ran flash's kernels. One folder per setting keeps each lever's own graph.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir()
    if os.path.basename(base).startswith("sdpa-"):  # already separated in this process
        base = os.path.dirname(base)
    path = os.path.join(base, f"sdpa-{backend}")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = path
    return path


def sdpa_in(kernel_names) -> list[str]:
    """The SDPA backends whose kernels appear among ``kernel_names`` (a profile's)."""
    return [b for b, mark in SDPA_KERNELS.items() if any(mark in n for n in kernel_names)]


def _loss_fn(kind: str, chunk_rows: int):
    """(x (n, h), weight (V, h), targets (n,)) -> mean loss."""
    if kind == "liger":
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        liger = LigerFusedLinearCrossEntropyLoss()
        return lambda x, w, t: liger(w, x, t)
    if kind == "chunked":
        return lambda x, w, t: chunked_linear_ce(x, w, t, chunk_rows)
    if kind == "plain":
        return lambda x, w, t: torch.nn.functional.cross_entropy((x @ w.t()).float(), t)
    raise ValueError(f"unknown loss {kind!r}: one of {LOSSES[1:]}")


def use_loss(model, kind: str, chunk_rows: int = 4096) -> None:
    """Give the causal LM inside ``model`` a forward that returns only ``.loss``, computed by
    ``kind`` from the decoder's last hidden states (no logits are returned or kept)."""
    owner = decoder_owner(model)
    loss_fn = _loss_fn(kind, chunk_rows)

    def forward(input_ids, labels, attention_mask=None, **_):  # the mask is all ones here
        hidden = owner.model(input_ids=input_ids).last_hidden_state  # (b, s, h)
        x = hidden.reshape(-1, hidden.shape[-1])  # (b·s, h)
        return SimpleNamespace(loss=loss_fn(x, owner.lm_head.weight, shifted_targets(labels)))

    owner.forward = forward


def compile_model(model, mode: str = "default") -> None:
    """``torch.compile`` the whole decoder stack (embedding, every layer, final norm) as one
    graph."""
    owner = decoder_owner(model)
    owner.model = torch.compile(owner.model, mode=None if mode == "default" else mode)


def recompute_layers(model, k: int) -> int:
    """Recompute the activations of the first ``k`` decoder layers in the backward (non-reentrant
    ``torch.utils.checkpoint`` around each one's forward); returns how many.

    Call it after :func:`helpers.train.decoder.compile_layers`, so that the checkpoint wraps the
    compiled layer. Put inside a per-layer compile, the checkpoint is the compiled frame itself,
    Dynamo does not trace it, and the layer runs eagerly, forward and recompute alike (Chapter 8,
    "One H200, one lever per row"). A whole-decoder compile traces the checkpoint either way.
    """
    from functools import partial

    from torch.utils.checkpoint import checkpoint

    layers = decoder_owner(model).model.layers
    for layer in list(layers)[:k]:
        inner = layer.forward
        layer.forward = partial(checkpoint, inner, use_reentrant=False)
    return min(k, len(layers))


def before_wrapping(model, args) -> None:
    """The levers that replace parameters (``--fuse_proj``): on the plain model, before a plugin
    or FSDP2 takes its parameters."""
    if getattr(args, "fuse_proj", False):
        if getattr(args, "tp", 1) > 1:  # shardformer's Llama policy splits q/k/v and gate/up
            raise SystemExit("--fuse_proj needs --tp 1: tensor parallelism shards the unfused ones")

        fuse_projections(model)


def apply(model, args) -> None:
    """Every lever of ``args`` on a built (and, for Colossal-AI, boosted) model, in the order that
    works: FP8 linears inside the layers, then compile, then recompute around the compiled
    layers, then the loss head."""
    set_sdpa_backend(args.sdpa)
    if args.compile:
        separate_compile_cache(args.sdpa)
    if args.fp8 == "torch":
        fp8_linears(decoder_owner(model).model.layers)
    if args.compile:
        if args.compile_scope == "model":
            compile_model(model, args.compile_mode)
        else:
            mode = None if args.compile_mode == "default" else args.compile_mode
            compile_layers(model, mode=mode)
    if args.recompute_layers:  # around the compiled layers, not inside them
        recompute_layers(model, args.recompute_layers)
    if args.fused_ce != "hf" or (args.compile and args.compile_scope == "model"):
        use_loss(model, "plain" if args.fused_ce == "hf" else args.fused_ce, args.ce_chunk)
