"""What autograd keeps for one decoder layer, the final norm and the loss: Chapter 7's counts.

Used by the one memory model (:mod:`helpers.cost.memory_llama`, Chapter 7) and through it by
Chapter 3's planner. Each count is read from the code that allocates it (transformers 4.51, torch,
Colossal-AI 0.5.0) and, for the Llama, checked to the byte on the CPU with
``saved_tensors_hooks`` (:func:`helpers.cost.census.count_saved_bytes`). With N tokens on the
rank, e bytes per element of the compute dtype, h hidden, f the MLP width, a heads:

* **Llama** (RMSNorm, SwiGLU): each RMSNorm keeps its input in fp32 (4Nh), 1/rms (4N), the
  normalised value and the weighted output (2·eNh); the MLP keeps gate, silu(gate), up and their
  product (4eNf).
* **GPT** (LayerNorm, GELU 4h MLP, biases, learned positions; dropout off, GELU as torch's one
  kernel): each LayerNorm keeps its input (eNh), mean and 1/std (2eN, in the parameters' dtype)
  and its output, the next linear's input (eNh); the MLP keeps the fc1 output (GELU's input) and
  the GELU output (fc2's input), 2eNf. Biases are added inside the matmul and keep nothing.
  Checked on the CPU against transformers' ``GPT2LMHeadModel`` (tests/test_memory_plan.py).
* **Attention**, both styles: q, k, v and the o_proj input (4eNh; with grouped-query attention k
  and v are still h wide, as transformers' ``repeat_kv`` copies them before the kernel); fused
  ``sdpa`` keeps its output and log-sum-exp (eNh + 4Na); eager attention keeps Korthikanti's s²
  term instead, the Llama's fp32 softmax and its 16-bit copy, (4 + e)·b·a·s², GPT-2's softmax in
  the compute dtype, e·b·a·s².
* **Parallelism**: tensor parallelism divides attention and MLP by t, not the norms. Colossal-AI's
  ``split_gather`` (``_LinearWithGatherForwardReduceScatterBackward``, Chapter 9) keeps the
  all-gathered input of every column-parallel linear (q, k, v, gate, up in a Llama; c_attn and
  c_fc in a GPT) besides the split input, one full eNh copy each. The norms are counted as under
  plain tensor parallelism, without the t-fold saving on the split sequence: Chapter 3's record
  (a 0.54 B Llama, tp=2 with and without split_gather) does not show it, so this one choice was
  made with that record in view. An own sequence axis (Ulysses ``all_to_all``) leaves N/S tokens
  on a rank and splits the heads over S inside attention.
"""

from __future__ import annotations

from helpers.cost.comm import added
from helpers.models.shape import ModelShape


def column_linears(shape: ModelShape) -> int:
    """Column-parallel linears of one layer, each keeping a gathered input under split_gather."""
    return 5 if shape.mlp == "swiglu" else 2  # q, k, v, gate, up | c_attn, c_fc


def layer_activation_parts(
    shape: ModelShape,
    tokens: float,
    seq: int,
    e: int,
    tp: int = 1,
    attn: str = "sdpa",
    cuda: bool = False,
    sp_mode: str | None = None,
) -> dict:
    """Bytes autograd saves for one decoder layer, per rank, by part (module docstring).

    ``tokens`` are the rank's tokens (b·s/S with an own sequence axis of size S), ``seq`` the full
    sequence length. ``cuda``: on a GPU, fp32 ``sdpa`` runs the memory-efficient kernel, whose
    output is laid out (b, s, a, d), so HF's ``transpose(1, 2).contiguous()`` copies nothing and
    the o_proj input *is* the kernel output; bf16 runs flash attention, whose output is
    ``empty_like(q)``, laid out (b, a, s, d), so the copy happens (as on the CPU)."""
    n, h, f, a = tokens, shape.hidden, shape.ffn, shape.heads
    if attn == "sdpa":
        shared = cuda and e == 4
        # output and log-sum-exp of the fused kernel
        core = (0 if shared else e * n * h) + 4 * n * a
    elif shape.mlp == "swiglu":
        copy = e if e != 4 else 0  # softmax(dtype=fp32).to(e-byte dtype): no copy in fp32
        core = (4 + copy) * (tokens / seq) * a * seq * seq  # the fp32 softmax and its copy
    else:  # HF GPT-2's eager path: the softmax in the compute dtype
        core = e * (tokens / seq) * a * seq * seq
    if shape.mlp == "swiglu":
        norms = ("2 RMSNorms", 2 * ((4 + 2 * e) * n * h + 4 * n))
        mlp = ("SwiGLU MLP", 4 * e * n * f / tp)  # gate, silu(gate), up, their product
    else:
        norms = ("2 LayerNorms", 2 * (2 * e * n * h + 2 * e * n))  # input, mean, 1/std, output
        mlp = ("GELU MLP", 2 * e * n * f / tp)  # GELU's input and output
    parts = {
        norms[0]: norms[1],
        # repeat_kv expands GQA k, v first
        "q, k, v, o_proj input": (3 * e * n * h + e * n * h) / tp,
        "attention core": core / tp,
        mlp[0]: mlp[1],
    }
    if sp_mode == "split_gather":
        parts["gathered inputs"] = column_linears(shape) * e * n * h
    return parts


def layer_activation_bytes(shape: ModelShape, tokens: float, seq: int, e: int, **options) -> float:
    """Bytes autograd saves for one decoder layer, per rank: the sum of its parts
    (:func:`layer_activation_parts`, whose keywords ``options`` are)."""
    return added(layer_activation_parts(shape, tokens, seq, e, **options).values())


def head_activation_bytes(shape: ModelShape, tokens: float, e: int) -> float:
    """The final norm's saved tensors (the lm_head input among them)."""
    if shape.mlp == "swiglu":
        return (4 + 2 * e) * tokens * shape.hidden + 4 * tokens
    return 2 * e * tokens * shape.hidden + 2 * e * tokens


def loss_bytes(layout, tokens: float, e: int) -> dict:
    """Logits and cross-entropy memory: what forward keeps, and the transient peaks of forward and
    backward. HF's loss (no tp/pp): fp32 upcast + fp32 log-softmax. Colossal-AI's pipeline forward
    (pp > 1): cross entropy on e-byte logits after a contiguous copy. Its tp forward: the
    vocab-parallel cross entropy keeps the e-byte softmax of the local vocabulary shard."""
    nv = tokens * layout.shape.vocab / layout.tp
    if layout.pp > 1:
        return {"kept": e * nv, "forward": 3 * e * nv, "backward": 3 * e * nv}
    if layout.tp > 1:
        # logits, their contiguous copy, the max-shifted copy, the fp32 softmax and its e-byte copy
        return {"kept": e * nv, "forward": 4 * e * nv + 4 * nv, "backward": 2 * e * nv}
    upcast = 4 * nv if e != 4 else 0
    return {"kept": 4 * nv, "forward": e * nv + upcast + 4 * nv, "backward": 12 * nv}
