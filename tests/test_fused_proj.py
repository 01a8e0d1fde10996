"""Fused q/k/v and gate/up projections (helpers.train.fused_proj): the same loss and gradients as
the unfused Hugging Face Llama, with grouped-query attention too, under torch.compile, and clear
errors where the fusion cannot apply."""

import copy

import pytest
import torch

from helpers.models.llama import build_llama, llama_config, token_batch
from helpers.train.fused_proj import fuse_projections


def _pair(kv_heads=None, attn="sdpa"):
    config = llama_config(layers=2, hidden=32, heads=4, kv_heads=kv_heads, vocab=64, attn=attn)
    model = build_llama(config, dtype=torch.float64)
    fused = copy.deepcopy(model)
    assert fuse_projections(fused) == 2
    return model, fused


def _loss_and_grads(model, batch):
    model.zero_grad()
    loss = model(**batch).loss
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def _unfused_view(grads: dict, config) -> dict:
    """The fused model's gradients split back into the unfused parameter names."""
    head = config.hidden_size // config.num_attention_heads
    sizes = [config.num_attention_heads * head] + [config.num_key_value_heads * head] * 2
    out = {}
    for name, g in grads.items():
        if name.endswith("qkv_proj.weight"):
            stem = name[: -len("qkv_proj.weight")]
            for part, piece in zip(("q", "k", "v"), g.split(sizes)):
                out[f"{stem}{part}_proj.weight"] = piece
        elif name.endswith("gate_up_proj.weight"):
            stem = name[: -len("gate_up_proj.weight")]
            gate, up = g.chunk(2)
            out[f"{stem}gate_proj.weight"], out[f"{stem}up_proj.weight"] = gate, up
        else:
            out[name] = g
    return out


@pytest.mark.parametrize("kv_heads,attn", [(None, "sdpa"), (2, "sdpa"), (2, "eager")])
def test_fused_projections_keep_the_loss_and_every_gradient(kv_heads, attn):
    model, fused = _pair(kv_heads, attn)
    batch = token_batch(0, 2, 16, 64)
    ref_loss, ref_grads = _loss_and_grads(model, batch)
    loss, grads = _loss_and_grads(fused, batch)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-12, atol=1e-12)
    split = _unfused_view(grads, model.config)
    assert split.keys() == ref_grads.keys()
    for name, g in ref_grads.items():
        torch.testing.assert_close(split[name], g, rtol=1e-10, atol=1e-12, msg=name)
    names = {n for n, _ in fused.named_parameters()}
    assert "model.layers.0.self_attn.qkv_proj.weight" in names
    assert "model.layers.0.mlp.gate_up_proj.weight" in names
    assert not any(n.endswith(("q_proj.weight", "gate_proj.weight")) for n in names)
    assert sum(p.numel() for p in fused.parameters()) == sum(p.numel() for p in model.parameters())


def test_layers_share_one_class_so_a_compiled_layer_is_reused():
    _, fused = _pair()
    layers = fused.model.layers
    assert type(layers[0].self_attn) is type(layers[1].self_attn)
    assert type(layers[0].mlp) is type(layers[1].mlp)


def test_fused_layers_compile_to_the_same_loss():
    from helpers.train.decoder import compile_layers

    model, fused = _pair()
    batch = token_batch(1, 2, 16, 64)
    ref = model(**batch).loss
    compile_layers(fused)
    torch.testing.assert_close(fused(**batch).loss, ref, rtol=1e-9, atol=1e-9)


def test_fusing_twice_or_with_a_cache_fails_clearly():
    _, fused = _pair()
    with pytest.raises(TypeError, match="already fused"):
        fuse_projections(fused)
    layer = fused.model.layers[0]
    x = torch.zeros(1, 4, 32, dtype=torch.float64)
    rope = fused.model.rotary_emb(x, torch.arange(4)[None])
    with pytest.raises(ValueError, match="no KV cache"):
        layer.self_attn(x, rope, None, past_key_value=object())


def test_the_lever_refuses_tensor_parallelism():
    from types import SimpleNamespace

    from helpers.train.levers import before_wrapping

    model, _ = _pair()
    with pytest.raises(SystemExit, match="--tp 1"):
        before_wrapping(model, SimpleNamespace(fuse_proj=True, tp=2))
    before_wrapping(model, SimpleNamespace(fuse_proj=False, tp=2))  # nothing to do, nothing raised
    assert hasattr(model.model.layers[0].self_attn, "q_proj")


def test_the_demo_trains_fused_under_fsdp2_on_its_reference():
    """The real entry point, two CPU ranks: FSDP2 shards the fused parameters, and the loss stays
    on the unfused single-process reference (the reference trains before the fusion)."""
    from helpers.train.reference import loss_verdict
    from helpers.run.launch import launch

    args = "--framework fsdp2 --steps 2 --warmup 1 --ref_steps 2 --seq 64 --micro_batch 2".split()
    run = launch(
        "ch08_train", 2, args + ["--fuse_proj", "--fail_on_divergence", "1e-4"], show="none"
    )
    ranks = [r for r in run.results if "framework" in r]
    assert len(ranks) == 2 and all(r["fuse_proj"] for r in ranks)
    verdict = loss_verdict(ranks, 1e-4)  # the ranks' mean loss, step by step, on the reference
    assert verdict["valid"] and verdict["max_ref_gap"] <= 1e-4, verdict
