"""A mixture-of-experts decoder's parameters, FLOPs, model states and expert all-to-all, for
Chapter 12's DeepSeek-V3 row.

Used by Chapter 12 (in practice). :class:`helpers.models.shape.ModelShape` has one MLP per
layer; DeepSeek-V3 (DeepSeek-AI 2024, technical report §2.1 and §4.2) has multi-head latent
attention (MLA), three dense layers and then layers of one shared and 256 routed experts of which
8 run per token. Counted here from its published dimensions:

* **MLA per layer**: W_DQ h×d_q, W_UQ d_q×n(d_nope + d_rope), W_DKV h×(d_c + d_rope),
  W_UKV d_c×n(d_nope + d_v), W_O n·d_v×h (report §2.1.1, eqs. 1-11).
* **Experts**: SwiGLU of width f_e (three h×f_e matrices each); the router h×E.
* **FLOPs per token** in the book's count (:mod:`helpers.cost.mfu`): 6 × the parameters a token
  uses, plus attention scores 6·L·n·(d_nope + d_rope + d_v)·s (QKᵀ and AV, forward and backward,
  no causal saving: the 12·L·h·s of a model with d = h/n).
* **Expert all-to-all** (report §3.2.2): a token goes to at most M = 4 nodes, once per node over
  InfiniBand (then NVLink inside the node); dispatch in FP8 (1 byte), combine in BF16 (2 bytes),
  both again in backward.
* **Model states**: Megatron-LM's distributed optimizer bytes
  (:func:`helpers.cost.memory_plan.megatron_bytes_per_param`) with the dense part sharded over the
  data-parallel group and the experts over their own data-parallel group (D·P·... / EP).
"""

from __future__ import annotations

from dataclasses import dataclass

from helpers.cost.comm import Link
from helpers.cost.memory_plan import megatron_bytes_per_param


@dataclass(frozen=True)
class MoEShape:
    """A decoder with MLA attention, ``dense_layers`` dense SwiGLU layers, then MoE layers."""

    layers: int = 61
    hidden: int = 7168
    heads: int = 128
    q_rank: int = 1536  # d_q: query compression
    kv_rank: int = 512  # d_c: key-value compression
    nope_dim: int = 128  # per-head dimension without rotary position
    rope_dim: int = 64  # decoupled rotary key/query dimension per head
    v_dim: int = 128
    dense_layers: int = 3
    dense_ffn: int = 18432
    experts: int = 256  # routed experts per MoE layer
    shared: int = 1
    active: int = 8  # routed experts per token
    expert_ffn: int = 2048
    vocab: int = 129280
    seq_len: int = 4096
    name: str = "DeepSeek-V3"

    @property
    def attention(self) -> int:
        h, n = self.hidden, self.heads
        qk = self.nope_dim + self.rope_dim
        return (
            h * self.q_rank
            + self.q_rank * n * qk
            + h * (self.kv_rank + self.rope_dim)
            + self.kv_rank * n * (self.nope_dim + self.v_dim)
            + n * self.v_dim * h
        )

    @property
    def expert(self) -> int:
        return 3 * self.hidden * self.expert_ffn

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers

    @property
    def embeddings(self) -> int:
        return 2 * self.vocab * self.hidden  # untied embedding and head

    @property
    def dense_params(self) -> int:
        """Everything but the routed experts: attention, dense FFNs, shared experts, routers,
        embeddings."""
        return (
            self.layers * self.attention
            + self.dense_layers * 3 * self.hidden * self.dense_ffn
            + self.moe_layers * (self.shared * self.expert + self.hidden * self.experts)
            + self.embeddings
        )

    @property
    def routed_params(self) -> int:
        return self.moe_layers * self.experts * self.expert

    @property
    def params(self) -> int:
        return self.dense_params + self.routed_params

    @property
    def active_params(self) -> int:
        return self.dense_params + self.moe_layers * self.active * self.expert

    def flops_per_token(self, seq: int | None = None) -> float:
        s = self.seq_len if seq is None else seq
        dims = self.nope_dim + self.rope_dim + self.v_dim
        return 6 * self.active_params + 6 * self.layers * self.heads * dims * s


def ep_bytes_per_token(shape: MoEShape, nodes: int = 4) -> float:
    """Bytes one token sends over the network per MoE layer and training step: FP8 dispatch and
    BF16 combine to ``nodes`` nodes, forward and backward."""
    return 2 * nodes * shape.hidden * (1 + 2)


def ep_step(
    shape: MoEShape,
    tokens_per_gpu: float,
    pp: int,
    link: Link,
    flops_per_s: float,
    nodes: int = 4,
) -> dict:
    """Seconds of compute and of expert all-to-all for one GPU's tokens in one step, for the
    ``moe_layers / pp`` MoE layers of its stage: ``exposed`` is what a perfect overlap (DualPipe's
    aim) leaves, max(0, all-to-all - compute)."""
    layers = shape.layers / pp
    compute = tokens_per_gpu * shape.flops_per_token() / pp / flops_per_s
    a2a = tokens_per_gpu * (shape.moe_layers / pp) * ep_bytes_per_token(shape, nodes)
    a2a_s = a2a / link.bandwidth_bytes_per_s + 4 * layers * link.latency_s
    return {"compute_s": compute, "ep_s": a2a_s, "exposed_s": max(0.0, a2a_s - compute)}


def states_per_gpu(shape: MoEShape, pp: int, ep: int, dp: int) -> float:
    """Model-state bytes per GPU: the stage's dense part under Megatron-LM's distributed optimizer
    over ``dp`` ranks, and ``experts / ep`` experts per MoE layer sharded over the ``dp / ep``
    replicas of each expert (bf16 weights, fp32 main gradients)."""
    dense = shape.dense_params / pp
    experts = shape.routed_params / pp / ep
    return dense * megatron_bytes_per_param(dp) + experts * megatron_bytes_per_param(
        max(1, dp // ep)
    )
