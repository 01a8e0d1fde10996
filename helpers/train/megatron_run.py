"""Chapter 6's head-to-head: Megatron-Core's ``GPTModel`` and distributed optimizer, one GPU.

The run's book config goes through the converter, :func:`helpers.config.megatron_args.to_megatron`
(Megatron-LM's flags), and :func:`helpers.config.megatron_core.core_kwargs` turns the flags into
the keyword arguments of Megatron-Core's own objects, built by :func:`build`:
``parallel_state.initialize_model_parallel`` with the TP/PP sizes, ``TransformerConfig``,
``GPTModel`` on the local layer spec whose core attention is swapped for :class:`SDPAAttention`
through its ``ModuleSpec`` (:func:`layer_spec`: the way Megatron-Core swaps kernels; the local
spec's own ``DotProductAttention`` materialises the s × s scores), ``DistributedDataParallel``
and ``get_megatron_optimizer`` with the distributed optimizer. The model starts from the Hugging
Face Llama's weights (:func:`hf_to_megatron`), so that it is trained from the same initial
weights on the same batches as the other frameworks and as the single-GPU reference.

Megatron-Core is imported only inside :func:`build` and :func:`layer_spec`: its wheels need
Python 3.12 and its layers CUDA. :func:`hf_to_megatron` and :class:`SDPAAttention` need neither
(tests/test_ch06_megatron.py runs them on the CPU).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from helpers.config.megatron_args import to_megatron
from helpers.config.megatron_core import core_kwargs, names
from helpers.models.llama import build_llama, shard_batch, token_batch
from helpers.train.framework_bench import book_config
from helpers.train.framework_run import reference_losses
from helpers.train.levers import set_sdpa_backend

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu}
# Megatron-Core's own fused cross-entropy in plain PyTorch (TransformerConfig fields of 0.19.2);
# Transformer Engine's would need TE, which the GPU machine does not have
FUSED_CE = {"cross_entropy_loss_fusion": True, "cross_entropy_fusion_impl": "native"}


class SDPAAttention(torch.nn.Module):
    """Megatron-Core's core attention through ``torch.nn.functional.scaled_dot_product_attention``
    (the backend is SDPA's choice, or the one ``--sdpa`` allows: cuDNN, flash, ...).

    Built like the local spec's ``DotProductAttention`` (keyword arguments ``config``,
    ``layer_number``, ``attn_mask_type``, ...; megatron/core/transformer/attention.py,
    ``CoreAttentionBuilder``) and called like it: query ``[s, b, n, d]``, key and value
    ``[s, b, g, d]`` with g query groups; returns ``[s, b, n·d]``. Causal, no dropout; the mask
    argument is ignored (the causal mask is the only one these runs have)."""

    def __init__(self, config=None, softmax_scale=None, **_):
        super().__init__()
        self.scale = softmax_scale  # None: 1/sqrt(d), as DotProductAttention's default

    def forward(self, query, key, value, attention_mask=None, **_):
        s, b, n, d = query.shape
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads, s, d]
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=self.scale, enable_gqa=k.shape[1] != n
        )
        return out.permute(2, 0, 1, 3).reshape(s, b, n * d)


# [start: module-spec]
def layer_spec():
    """Megatron-Core's local GPT layer with RMSNorm, its core attention swapped for SDPA: a
    ``ModuleSpec`` names the class of every submodule, so a kernel is swapped by naming another."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec  # Megatron-Core
    from megatron.core.transformer.spec_utils import ModuleSpec  # Megatron-Core

    spec = get_gpt_layer_local_spec(normalization="RMSNorm")
    spec.submodules.self_attention.submodules.core_attention = ModuleSpec(module=SDPAAttention)
    return spec
    # [end: module-spec]


def hf_to_megatron(state: dict, heads: int, kv_heads: int, layers: int) -> dict:
    """A Hugging Face Llama's state dict under ``GPTModel``'s names (local spec). q, k and v go
    into one ``linear_qkv`` weight, grouped per key/value head as Megatron-Core splits it
    (megatron/core/transformer/attention.py, ``get_query_key_value_tensors``: per group the
    group's query heads, then its key, then its value); gate and up into one ``linear_fc1``
    (SwiGLU takes the first half as the gate)."""
    out = {
        "embedding.word_embeddings.weight": state["model.embed_tokens.weight"],
        "decoder.final_layernorm.weight": state["model.norm.weight"],
        "output_layer.weight": state["lm_head.weight"],
    }
    for i in range(layers):
        hf, mc = f"model.layers.{i}.", f"decoder.layers.{i}."
        wq, wk, wv = (state[f"{hf}self_attn.{x}_proj.weight"] for x in "qkv")
        h, d = wq.shape[1], wq.shape[0] // heads
        qkv = [wq.view(kv_heads, heads // kv_heads * d, h), wk.view(kv_heads, d, h)]
        qkv.append(wv.view(kv_heads, d, h))
        out[mc + "self_attention.linear_qkv.weight"] = torch.cat(qkv, dim=1).reshape(-1, h)
        out[mc + "self_attention.linear_proj.weight"] = state[f"{hf}self_attn.o_proj.weight"]
        out[mc + "input_layernorm.weight"] = state[f"{hf}input_layernorm.weight"]
        out[mc + "pre_mlp_layernorm.weight"] = state[f"{hf}post_attention_layernorm.weight"]
        gate_up = [state[f"{hf}mlp.gate_proj.weight"], state[f"{hf}mlp.up_proj.weight"]]
        out[mc + "mlp.linear_fc1.weight"] = torch.cat(gate_up, dim=0)
        out[mc + "mlp.linear_fc2.weight"] = state[f"{hf}mlp.down_proj.weight"]
    return out


def resolved(kwargs: dict) -> dict:
    """``core_kwargs``' plain values as the objects Megatron-Core takes (dtypes, activations)."""
    out = dict(kwargs)
    for key in ("params_dtype", "pipeline_dtype"):
        if key in out:
            out[key] = DTYPES[out[key]]
    if "activation_func" in out:
        out["activation_func"] = ACTIVATIONS[out["activation_func"]]
    return out


def add_arguments(p) -> None:
    """Megatron-Core's own levers (the Hugging Face ones of ``--fused_ce`` do not apply)."""
    p.add_argument(
        "--mcore_fused_ce",
        action="store_true",
        help="Megatron-Core's fused cross-entropy (cross_entropy_fusion_impl='native')",
    )


class MegatronTrainer:
    """One optimizer step on global batch ``k``: this rank's rows in micro-batches, the per-token
    losses of ``GPTModel`` (labels are the next tokens, the last position left out, as Hugging
    Face's loss does), gradients finalised, the distributed optimizer's step."""

    def __init__(self, model, optimizer, layout, device, finalize):
        self.model, self.opt, self.layout, self.device = model, optimizer, layout, device
        self.finalize = finalize
        self.rank, self.ranks = torch.distributed.get_rank(), torch.distributed.get_world_size()

    def step(self, k: int) -> float:
        lay = self.layout
        full = token_batch(k, lay.global_batch, lay.seq, lay.shape.vocab)
        ids = shard_batch(full, self.rank, self.ranks)["input_ids"].to(self.device)
        labels = torch.roll(ids, -1, dims=1)  # the next token; the last one wraps, left out
        positions = torch.arange(lay.seq, device=self.device).expand_as(ids)
        self.model.zero_grad_buffer()
        self.opt.zero_grad()
        m, b, total = lay.microbatches, lay.micro_batch, None
        for i in range(m):
            rows = slice(i * b, (i + 1) * b)
            per_token = self.model(ids[rows], positions[rows], None, labels=labels[rows])
            loss = per_token[:, :-1].float().mean()
            (loss / m).backward()
            total = loss.detach() if total is None else total + loss.detach()
        self.finalize([self.model])
        self.opt.step()
        return (total / m).item()


def build(layout, args, env):
    """(trainer, Hugging Face model config, reference losses, the RESULT's Megatron fields)."""
    from megatron.core import package_info, parallel_state  # Megatron-Core: GPU, Python 3.12
    from megatron.core import tensor_parallel  # Megatron-Core
    from megatron.core.distributed import DistributedDataParallel, finalize_model_grads
    from megatron.core.distributed import DistributedDataParallelConfig  # Megatron-Core
    from megatron.core.models.gpt import GPTModel  # Megatron-Core
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer  # Megatron-Core
    from megatron.core.transformer import TransformerConfig  # Megatron-Core
    from megatron.core.transformer.module import Float16Module  # Megatron-Core

    set_sdpa_backend(args.sdpa)  # the backend SDPAAttention's calls may use
    args_mg, notes = to_megatron(book_config(layout, args, zero_stage=1))
    kw = core_kwargs(args_mg)
    parallel_state.initialize_model_parallel(**kw["initialize_model_parallel"])
    tensor_parallel.model_parallel_cuda_manual_seed(0)
    config = layout.shape.config(attn=layout.attn, max_seq=layout.seq)
    with torch.device(env.device):
        hf = build_llama(config)  # the other rows' weights, and the reference's
    reference = reference_losses(hf, layout, args, env.device) if args.ref_steps else []
    levers = FUSED_CE if args.mcore_fused_ce else {}
    assert set(levers) <= names()["TransformerConfig"]
    tc = TransformerConfig(**resolved(kw["TransformerConfig"]), **levers)
    model = GPTModel(config=tc, transformer_layer_spec=layer_spec(), **kw["GPTModel"])
    heads, groups = config.num_attention_heads, config.num_key_value_heads
    state = hf_to_megatron(hf.state_dict(), heads, groups, config.num_hidden_layers)
    missing, unexpected = model.load_state_dict(state, strict=False)
    trained = {n for n, _ in model.named_parameters()}
    if trained - set(state) or set(unexpected):
        raise RuntimeError(f"weights not mapped: {sorted(trained - set(state))}, {unexpected}")
    del hf, state
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(env.device)
    model = Float16Module(tc, model.to(env.device))  # as pretrain_gpt.py wraps a bf16 model
    ddp = DistributedDataParallel(
        config=tc,
        ddp_config=DistributedDataParallelConfig(**kw["DistributedDataParallelConfig"]),
        module=model,
    )
    optimizer = get_megatron_optimizer(OptimizerConfig(**kw["OptimizerConfig"]), [ddp])
    extra = dict(
        plugin="GPTModel + DistributedOptimizer",
        optimizer="Megatron-Core distributed optimizer (torch AdamW inside)",
        megatron_args=args_mg,
        megatron_core_kwargs=kw,
        core_attention="SDPAAttention (ModuleSpec)",
        megatron_core=package_info.__version__,
        fused_ce="megatron native" if levers else "none",
        notes=notes,
    )
    trainer = MegatronTrainer(ddp, optimizer, layout, env.device, finalize_model_grads)
    return trainer, config, reference, extra
