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

Chapter 9 (MoE all-to-all and balance) adds any MoE layer's volumes, times and memory:

* **Dispatch and combine** (:func:`dispatch_bytes`): GShard's buffer (n_exp, C, h) with
  C = ⌈φ·k·n_tok/n_exp⌉, padding included, of which a rank hands (E-1)/E to the other E - 1 ranks
  of its expert group; dropless (no φ), the k·n_tok choices themselves, evenly spread. The combine
  sends as many back; the backward repeats both (:func:`ep_layer_bytes`). The CPU demo counts
  them (``helpers/demos/ch09_moe.py``).
* **Across nodes** (:func:`ep_all_to_all_seconds`): a rank's (E - n_node)/E share leaves the node
  through its own network card, as every other rank's share goes through its own card at the same
  moment, so one rank sees one card (:func:`helpers.cost.placement.spanning_link`), where a ring
  all-reduce spreads one rank's bytes over all the node's cards. Sources, quoted:
  ``helpers/data/moe_sources.yaml``.
* **Memory** (:func:`moe_memory`): total and active parameters, the n_exp/E experts a rank holds
  with their gradients and optimizer states sharded by ZeRO over the D/E ranks that hold the same
  experts (Colossal-AI's ``moe_dp``), and the capacity buffers autograd keeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from helpers.cost.comm import Link, collective_time
from helpers.cost.memory import model_states
from helpers.cost.memory_plan import megatron_bytes_per_param
from helpers.cost.placement import spanning_link


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


# --- any MoE layer under expert parallelism (Chapter 9)


def buffer_slots(tokens: int, k: int, experts: int, capacity_factor: float | None) -> int:
    """Slots of one rank's dispatch buffer: n_exp · C with C = ⌈φ·k·n_tok/n_exp⌉ (at least 1), or
    the k·n_tok choices themselves when dropless (``capacity_factor`` None)."""
    if capacity_factor is None:
        return k * tokens
    return experts * max(1, math.ceil(capacity_factor * k * tokens / experts))


def dispatch_bytes(
    tokens: int,
    k: int,
    hidden: int,
    experts: int,
    ep: int,
    capacity_factor: float | None = 1.0,
    bytes_per_element: float = 2,
) -> float:
    """Bytes one rank hands to one dispatch all-to-all for the other E - 1 ranks of its expert
    group: (E-1)/E of its buffer of :func:`buffer_slots` · h elements. The combine sends as many
    (with its own ``bytes_per_element``: DeepSeek-V3 dispatches in FP8, combines in BF16).

    >>> dispatch_bytes(32, 2, 16, 4, 2, 1.0, 4)   # the CPU demo's 2 ranks, fp32
    2048.0
    """
    slots = buffer_slots(tokens, k, experts, capacity_factor)
    return (ep - 1) / ep * slots * hidden * bytes_per_element


def ep_layer_bytes(
    tokens: int,
    k: int,
    hidden: int,
    experts: int,
    ep: int,
    capacity_factor: float | None = 1.0,
    bytes_per_element: float = 2,
    backward: bool = True,
) -> float:
    """One MoE layer's all-to-all bytes per rank: dispatch and combine forward, and their two
    gradients backward (the backward of an all-to-all is the inverse all-to-all)."""
    one = dispatch_bytes(tokens, k, hidden, experts, ep, capacity_factor, bytes_per_element)
    return one * (4 if backward else 2)


def ep_all_to_all_seconds(
    size_bytes: float, ep: int, per_node: int, card: Link, intra: Link
) -> dict:
    """One all-to-all of a buffer of ``size_bytes`` per rank over ``ep`` ranks, ``per_node`` of them
    on each node: the (E - n_node)/E off the node through one card per rank (every rank's card is
    busy with its own share: :func:`helpers.cost.placement.spanning_link` never aggregates cards
    for an all-to-all), the (n_node - 1)/E inside it over ``intra``, at the same time.

    >>> ib = Link("ib", 50e9, 0); nv = Link("nv", 450e9, 0)
    >>> round(ep_all_to_all_seconds(1e9, 16, 8, ib, nv)["seconds"] * 1e3, 2)   # 0.5 GB at 50 GB/s
    10.0
    """
    if ep % per_node and per_node < ep:
        raise ValueError(f"{per_node} ranks per node do not tile an expert group of {ep}")
    nic = spanning_link(card, intra, "all_to_all", per_node, per_node)
    off = (ep - min(per_node, ep)) / ep * size_bytes
    on = (min(per_node, ep) - 1) / ep * size_bytes
    latency = max(nic.latency_s if off else 0.0, intra.latency_s if on else 0.0)
    seconds = latency + max(off / nic.bandwidth_bytes_per_s, on / intra.bandwidth_bytes_per_s)
    return {"off_node_bytes": off, "on_node_bytes": on, "seconds": seconds}


def ring_all_reduce_seconds(
    size_bytes: float, ranks: int, per_node: int, card: Link, intra: Link
) -> float:
    """The same group's ring all-reduce of ``size_bytes``, its node crossings spread over the
    node's ``per_node`` cards (:func:`helpers.cost.placement.spanning_link`), for comparison."""
    link = spanning_link(card, intra, "all_reduce", per_node, per_node)
    return collective_time("all_reduce", size_bytes, ranks, link)


def moe_memory(
    dense_params: float,
    expert_params: float,
    experts: int,
    moe_layers: int,
    k: int,
    dp: int,
    ep: int,
    zero_stage: int = 1,
    precision: str = "bf16",
    tokens: int = 0,
    hidden: int = 0,
    expert_ffn: int = 0,
    capacity_factor: float | None = 1.0,
    ffn_saved: int = 2,
    bytes_per_element: float = 2,
) -> dict:
    """One rank's MoE model: parameters, model-state bytes and capacity buffers.

    ``dense_params``: everything but the routed experts (attention, embeddings, routers, shared
    experts), data-parallel over ``dp`` ranks; ``expert_params``: one routed expert, ``experts``
    of them in each of ``moe_layers`` layers, ``k`` per token. A rank holds experts/E of them, and
    ZeRO shards their states over the D/E ranks that hold the same ones
    (:func:`helpers.cost.memory.model_states` for both parts; no tensor or pipeline split here).
    ``as_dense`` is what the dense formula gives for the same total: it shards nothing by E.
    Capacity buffers, per MoE layer and micro-batch of ``tokens`` per rank, are the slots a rank's
    experts receive (:func:`buffer_slots`), each saving its input (h) and ``ffn_saved`` · f
    intermediates for the backward (2 for GELU: its input and output; 4 for SwiGLU).
    """
    if dp % ep:
        raise ValueError(f"the data-parallel size {dp} must be divisible by ep = {ep}")
    routed = moe_layers * experts * expert_params
    dense_states = model_states(dense_params, precision, zero_stage, dp)
    expert_states = model_states(routed / ep, precision, zero_stage, dp // ep)
    states = [a + b for a, b in zip(dense_states, expert_states)]
    slots = buffer_slots(tokens, k, experts, capacity_factor) if tokens else 0
    return {
        "total_params": dense_params + routed,
        "active_params": dense_params + moe_layers * k * expert_params,
        "held_params": dense_params + routed / ep,
        "weights": states[0],
        "gradients": states[1],
        "optimizer": states[2],
        "model_states": sum(states),
        "as_dense": sum(model_states(dense_params + routed, precision, zero_stage, dp)),
        "capacity_buffers": moe_layers
        * slots
        * (hidden + ffn_saved * expert_ffn)
        * bytes_per_element,
    }
