"""Chapter 1, "the same with Colossal-AI": the lost causal mask, replayed in one CPU process.

With sequence parallelism on (or flash attention), Colossal-AI 0.5.0's Llama policy replaces the
attention's forward by ``get_llama_flash_attention_forward`` (``shardformer/policies/llama.py``;
the function is in ``shardformer/modeling/llama.py``). With flash attention off that forward
takes its eager branch and adds the mask the model hands it, nothing more. The mask comes from
transformers' ``LlamaModel._update_causal_mask``: for ``attn_implementation="eager"`` a
(b, 1, s, s) causal mask, for ``"sdpa"`` and no padding none at all, because sdpa would use its
own ``is_causal`` flag, which the replaced forward never sets.

This demo installs that very forward (sequence parallelism off, so no communication; the
all-to-all of Ulysses moves the same numbers) in Chapter 1's tiny Llama, built once with each
implementation, and reports three things:

* ``part="mask"``: the mask each model hands its first layer, and where the first layer's
  attention goes at initialisation: the share on later positions, and on the next position,
  whose token is the label the position is trained to predict;
* ``part="replay"``: the first ``--steps`` steps of Chapter 1's recorded layout (4 layers,
  hidden 256, 8 heads, a 128-token vocabulary, 8 fresh sequences of 256 tokens per step, AdamW
  at 1e-3, fp32), to compare with the recorded ``sdpa`` run and its reference in
  ``results/2xNVIDIA-H200/ch01_hybrid.json``;
* ``part="small"``: a smaller Llama (2 layers, hidden 64, 64 tokens) trained ``--small_steps``
  steps at 3e-3 without and with the mask, then evaluated on a fresh batch with the mask it was
  trained with and with a causal one.

    python -m torch.distributed.run --nproc_per_node 1 -m helpers.demos.ch01_mask --steps 4
"""

import copy
import types

import torch

from helpers.models.llama import build_llama, llama_config, token_batch
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch01 import MaskReplayResult, MaskSmallResult, MaskViewResult
from helpers.train.reference import train_reference

RECORDED = dict(layers=4, hidden=256, heads=8, vocab=128)  # helpers/demos/ch01_hybrid.py
SMALL = dict(layers=2, hidden=64, heads=4, vocab=128)


def colossal_attention(model) -> None:
    """Colossal-AI's replacement attention forward in every layer, as its Llama policy installs
    it (``num_heads`` is the attribute the policy sets; with sp off it is all the heads)."""
    from colossalai.shardformer.modeling.llama import get_llama_flash_attention_forward
    from colossalai.shardformer.shard.shard_config import ShardConfig

    forward = get_llama_flash_attention_forward(
        ShardConfig(enable_tensor_parallelism=False, enable_flash_attention=False)
    )
    for layer in model.model.layers:
        layer.self_attn.num_heads = model.config.num_attention_heads
        layer.self_attn.forward = types.MethodType(forward, layer.self_attn)


def models(shape: dict, device):
    """{implementation: model}: the same initial weights, Colossal-AI's attention in both."""
    out = {}
    for attn in ("eager", "sdpa"):
        model = build_llama(llama_config(**shape, attn=attn)).to(device)
        colossal_attention(model)
        out[attn] = model
    return out


def first_layer_view(model, batch: dict) -> dict:
    """The mask the first layer receives and where its attention goes (mean over the batch, the
    heads and the positions that have a later one)."""
    seen = {}

    def grab(module, args, kwargs):
        seen.update(kwargs)

    attn = model.model.layers[0].self_attn
    handle = attn.register_forward_pre_hook(grab, with_kwargs=True)
    with torch.no_grad():
        model(**batch)
        handle.remove()
        mask = seen["attention_mask"]
        _, probs = attn.forward(**{**seen, "output_attentions": True})  # (b, a, s, s)
    s = probs.shape[-1]
    later = torch.ones(s, s, dtype=torch.bool, device=probs.device).triu(1)
    return dict(
        mask=None if mask is None else list(mask.shape),
        blocked=0 if mask is None else int((mask < 0).sum().item()),
        later_share=probs.masked_fill(~later, 0).sum(-1)[..., :-1].mean().item(),
        next_share=probs.diagonal(offset=1, dim1=-2, dim2=-1).mean().item(),
    )


def evaluate(model, batch: dict) -> dict:
    """Loss on ``batch`` with the model's own mask and with a causal one (the eager mask)."""
    with torch.no_grad():
        own = model(**batch).loss.item()
        implementation = model.config._attn_implementation
        model.config._attn_implementation = "eager"
        causal = model(**batch).loss.item()
        model.config._attn_implementation = implementation
    return dict(own_mask=own, causal_mask=causal)


def main() -> None:
    p = cli.parser(__doc__)
    cli.add(p, "steps", 4, help="steps of the recorded layout to replay")
    p.add_argument("--small_steps", type=int, default=200, help="steps of the smaller model")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # as the recorded run
    with distributed() as env:
        dev = env.device
        to = lambda b: {k: v.to(dev) for k, v in b.items()}  # noqa: E731
        say(
            f"Colossal-AI's Llama attention forward in one process: {args.steps} steps of the "
            f"recorded layout, then {args.small_steps} steps of a smaller Llama, each without "
            "and with the causal mask"
        )
        recorded = models(RECORDED, dev)
        batches = [to(token_batch(k, 8, 256, RECORDED["vocab"])) for k in range(args.steps)]
        for attn, model in recorded.items():
            emit(
                MaskViewResult,
                part="mask",
                attn=attn,
                seq=256,
                **first_layer_view(model, batches[0]),
            )
        for attn, model in recorded.items():
            losses = train_reference(copy.deepcopy(model), batches, 1e-3)
            emit(MaskReplayResult, part="replay", attn=attn, losses=losses)
        small = models(SMALL, dev)
        batches = [to(token_batch(k, 8, 64, SMALL["vocab"])) for k in range(args.small_steps)]
        test = to(token_batch(10_000, 8, 64, SMALL["vocab"]))
        for attn, model in small.items():
            losses = train_reference(model, batches, 3e-3)
            emit(MaskSmallResult, part="small", attn=attn, losses=losses, **evaluate(model, test))


if __name__ == "__main__":
    main()
