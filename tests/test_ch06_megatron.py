"""Chapter 6's Megatron-Core path on the CPU, without Megatron-Core (its wheels need Python 3.12):
the converter's Megatron arguments as the keyword arguments of Megatron-Core 0.19.2's objects,
checked against the names read from its source (helpers/data/megatron_core_names.yaml); the
Hugging Face -> GPTModel weight mapping against Megatron-Core's own q/k/v split; the SDPA core
attention against plain softmax attention. Where Megatron-Core and a GPU are present, the marked
test builds the GPTModel with the swapped ModuleSpec and checks its loss against the Hugging Face
model's on the same weights."""

from __future__ import annotations

import pytest
import torch

from helpers.config.megatron_args import to_megatron
from helpers.config.megatron_core import FIELDS, OBJECTS, SWITCHES, TRAINING, core_kwargs, names
from helpers.config.schema import TrainConfig
from helpers.train.megatron_run import SDPAAttention, hf_to_megatron, resolved

FLAGSHIP = {
    "parallelism": {"data": 1, "zero_stage": 1},
    "train": {"batch_size": 32, "learning_rate": 3e-4, "precision": "bf16", "steps": 5},
    "model": {"kind": "llama", "layers": 16, "hidden": 2048, "heads": 16, "kv_heads": 16,
              "vocab": 32000, "seq_len": 2048},
}  # fmt: skip


def _flagship(**parallelism) -> TrainConfig:
    raw = {**FLAGSHIP, "parallelism": {**FLAGSHIP["parallelism"], **parallelism}}
    return TrainConfig.from_raw(raw, raw["parallelism"]["data"])


def test_every_mapped_name_is_megatron_cores():
    known = names()
    assert len(known["TransformerConfig"]) > 250  # with ModelParallelConfig's fields
    for targets in FIELDS.values():
        assert all(field in known[obj] for obj, field, _ in targets)
    for targets in SWITCHES.values():
        assert all(field in known[obj] for obj, field, _ in targets)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_flagship_as_megatron_core_objects():
    kw = core_kwargs(to_megatron(_flagship())[0])
    tc = kw["TransformerConfig"]
    assert tc["num_layers"] == 16 and tc["hidden_size"] == 2048 and tc["ffn_hidden_size"] == 5504
    assert tc["gated_linear_unit"] and tc["activation_func"] == "silu" and not tc["add_bias_linear"]
    assert tc["normalization"] == "RMSNorm" and tc["layernorm_epsilon"] == 1e-6
    assert tc["hidden_dropout"] == tc["attention_dropout"] == 0.0  # a Llama has none
    assert tc["bf16"] and tc["params_dtype"] == "bfloat16"
    assert kw["initialize_model_parallel"] == {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
    }
    assert kw["GPTModel"] == {
        "max_sequence_length": 2048,
        "vocab_size": 32000,
        "share_embeddings_and_output_weights": False,
        "position_embedding_type": "rope",
    }
    # ZeRO-1 in the book's config -> the distributed optimizer; bf16 reduced in fp32 as
    # pretrain_gpt.py does; no clipping, as the book's max_grad_norm 0
    assert kw["DistributedDataParallelConfig"] == {
        "use_distributed_optimizer": True,
        "grad_reduce_in_fp32": True,
    }
    assert kw["OptimizerConfig"] == {
        "use_distributed_optimizer": True,
        "bf16": True,
        "lr": 3e-4,
        "clip_grad": 0.0,
    }
    assert set(kw[TRAINING]) >= {"micro_batch_size", "global_batch_size", "train_iters"}
    assert set(kw) == {*OBJECTS, TRAINING}
    real = resolved(tc)
    assert real["params_dtype"] is torch.bfloat16 and real["activation_func"](torch.ones(1)) > 0


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_parallel_sizes_reach_parallel_state_and_the_config():
    raw = {**FLAGSHIP, "parallelism": {"data": 2, "tensor": 2, "pipeline": 2, "zero_stage": 1}}
    raw["parallelism"]["sequence_mode"] = "split_gather"
    raw["train"] = {**raw["train"], "micro_batch_size": 2, "batch_size": 16}
    kw = core_kwargs(to_megatron(TrainConfig.from_raw(raw, 8))[0])
    assert kw["initialize_model_parallel"] == {
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 2,
    }
    assert kw["TransformerConfig"]["sequence_parallel"] is True
    assert kw["TransformerConfig"]["tensor_model_parallel_size"] == 2


def test_an_unknown_field_is_refused(monkeypatch):
    monkeypatch.setitem(FIELDS, "--hidden-size", [("TransformerConfig", "hidden_sise", int)])
    with pytest.raises(ValueError, match="hidden_sise"):
        core_kwargs(["--hidden-size", "8"])


def _megatron_split(qkv: torch.Tensor, heads: int, groups: int, d: int):
    """Megatron-Core 0.19.2's split of linear_qkv's output (attention.py,
    get_query_key_value_tensors): [.., g, (heads/g + 2)·d] -> query, key, value."""
    per = heads // groups
    mixed = qkv.view(*qkv.shape[:-1], groups, (per + 2) * d)
    q, k, v = torch.split(mixed, [per * d, d, d], dim=-1)
    return q.reshape(*q.shape[:-2], heads, d), k, v


def test_weights_map_to_megatrons_layout():
    from helpers.models.llama import build_llama
    from helpers.models.shape import ModelShape

    heads, groups, h = 4, 2, 64
    hf = build_llama(ModelShape.llama(2, h, heads, groups, vocab=128).config(max_seq=16))
    state = hf.state_dict()
    mc = hf_to_megatron(state, heads, groups, 2)
    assert len(mc) == 3 + 6 * 2 and all(torch.is_tensor(t) for t in mc.values())
    x = torch.randn(5, h)
    attn = hf.model.layers[1].self_attn
    q, k, v = _megatron_split(
        x @ mc["decoder.layers.1.self_attention.linear_qkv.weight"].T, 4, 2, 16
    )
    torch.testing.assert_close(q.flatten(-2), attn.q_proj(x))
    torch.testing.assert_close(k.flatten(-2), attn.k_proj(x))
    torch.testing.assert_close(v.flatten(-2), attn.v_proj(x))
    mlp = hf.model.layers[1].mlp
    gate, up = (x @ mc["decoder.layers.1.mlp.linear_fc1.weight"].T).chunk(2, dim=-1)  # SwiGLU
    torch.testing.assert_close(gate, mlp.gate_proj(x))
    torch.testing.assert_close(up, mlp.up_proj(x))


def test_sdpa_attention_is_causal_softmax_attention():
    torch.manual_seed(0)
    s, b, n, g, d = 6, 2, 4, 2, 8
    query, key, value = torch.randn(s, b, n, d), torch.randn(s, b, g, d), torch.randn(s, b, g, d)
    out = SDPAAttention(config=None, layer_number=1)(query, key, value, None, attn_mask_type=None)
    k, v = (t.repeat_interleave(n // g, dim=2) for t in (key, value))  # each group's heads
    scores = torch.einsum("sbnd,tbnd->bnst", query, k) / d**0.5
    scores = scores.masked_fill(torch.ones(s, s).triu(1).bool(), float("-inf"))
    ref = torch.einsum("bnst,tbnd->sbnd", scores.softmax(-1), v).reshape(s, b, n * d)
    assert out.shape == (s, b, n * d)
    torch.testing.assert_close(out, ref)


@pytest.mark.gpu
def test_gpt_model_with_the_sdpa_spec_matches_hugging_face():
    pytest.importorskip("megatron.core")
    if not torch.cuda.is_available():
        pytest.skip("Megatron-Core's layers need CUDA")
    import torch.distributed as dist
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.models.gpt import GPTModel
    from megatron.core.transformer import TransformerConfig

    from helpers.models.llama import build_llama, token_batch
    from helpers.models.shape import ModelShape
    from helpers.run.env import distributed
    from helpers.train.megatron_run import layer_spec

    raw = {"parallelism": {"data": 1, "zero_stage": 1}, "train": {"batch_size": 2,
           "learning_rate": 3e-4, "steps": 1}, "model": {"kind": "llama", "layers": 2,
           "hidden": 64, "heads": 4, "kv_heads": 2, "vocab": 256, "seq_len": 32}}  # fmt: skip
    kw = core_kwargs(to_megatron(TrainConfig.from_raw(raw, 1))[0])
    with distributed():
        assert dist.get_world_size() == 1
        parallel_state.initialize_model_parallel(**kw["initialize_model_parallel"])
        tensor_parallel.model_parallel_cuda_manual_seed(0)
        tc = TransformerConfig(**resolved(kw["TransformerConfig"]))
        model = GPTModel(config=tc, transformer_layer_spec=layer_spec(), **kw["GPTModel"])
        hf = build_llama(ModelShape.llama(2, 64, 4, 2, vocab=256).config(max_seq=32)).cuda()
        model.load_state_dict(hf_to_megatron(hf.state_dict(), 4, 2, 2), strict=False)
        ids = token_batch(0, 2, 32, 256)["input_ids"].cuda()
        with torch.no_grad():
            ref = hf(input_ids=ids, labels=ids).loss
            per_token = model(ids, torch.arange(32).cuda().expand_as(ids), None,
                              labels=torch.roll(ids, -1, 1))  # fmt: skip
        assert abs(per_token[:, :-1].float().mean().item() - ref.item()) < 1e-4
        parallel_state.destroy_model_parallel()
