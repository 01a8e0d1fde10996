"""A mixture-of-experts layer from scratch: top-k router, capacity, dispatch, experts, combine.

Used by Chapter 9 (``helpers/demos/ch09_moe.py``, ``ch09_moe_balance.py`` and the notebook).
The layer follows GShard
(Lepikhin et al. 2021, "GShard: Scaling Giant Models with Conditional Computation and Automatic
Sharding", Sec. 2.2 and Algorithm 1) with Mixtral's gate (Jiang et al. 2024, "Mixtral of
Experts", Sec. 2.1):

* router: logits = x W_g; gate weights = softmax over the top-k logits' probabilities (softmax
  over all E experts, keep the k largest, renormalise them to sum to one);
* capacity: each expert takes at most C = ceil(capacity_factor · k · T / E) of the T tokens of a
  group; slots are filled first choice first, then second choice, in token order (GShard's
  priority); a token past an expert's capacity is dropped by that expert (its output there is 0,
  the residual connection around the layer carries the token on);
* dispatch: a buffer (E, C, h) holding each expert's tokens; experts: one FFN per expert,
  batched as (E, C, h) @ (E, h, f); combine: each token's outputs weighted by its gates;
* load-balancing loss (Switch Transformer, Fedus et al. 2022, eq. 4): E · Σ_i f_i · P_i with f_i
  the fraction of tokens whose first choice is expert i and P_i the mean router probability;
* auxiliary-loss-free balancing (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §2.1.2): a
  bias per expert added to the scores for the top-k choice only (:func:`route`), moved by γ
  against the sign of the expert's load error after every step (:func:`update_bias`);
  :func:`imbalance` and :func:`dropped_at` measure what either achieves.

:class:`PeerBytes` counts what the all-to-alls hand to the backend for each peer;
:func:`toy_batch` gives the balancing runs their skewed tokens and a target to learn.

Expert parallelism (:func:`expert_parallel_forward`) keeps E/P experts on each of P ranks and
each rank's own tokens (a "group" in GShard's words): the dispatch buffer is cut along the expert
axis and exchanged with one all-to-all, the local experts run on the tokens every rank sent them,
and the inverse all-to-all brings the outputs home to be combined. The all-to-all comes from
:mod:`helpers.parallel.sp` (its backward is the inverse all-to-all), so gradients travel back too.
With data parallelism on top (:func:`expert_data_grid`), the world is a dp × ep grid: each data
replica is one expert group holding every expert once, and each expert is replicated over the dp
group of ranks that hold it in the other replicas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers.parallel.sp import AllToAll


def expert_capacity(tokens: int, experts: int, k: int, capacity_factor: float) -> int:
    """C = ceil(capacity_factor · k · T / E): the slots each expert offers a group of T tokens."""
    return max(1, math.ceil(capacity_factor * k * tokens / experts))


@dataclass
class Routing:
    """Where each token goes: its k experts, gate weights, slot in the expert's buffer, kept or
    dropped."""

    expert: torch.Tensor  # (T, k) expert index of each choice
    gate: torch.Tensor  # (T, k) weight of each choice (sums to 1 over k)
    slot: torch.Tensor  # (T, k) position in that expert's buffer
    kept: torch.Tensor  # (T, k) bool: slot < capacity
    probs: torch.Tensor  # (T, E) router probabilities (for the balancing loss)
    capacity: int

    def routed_per_expert(self, experts: int) -> torch.Tensor:
        """Tokens that chose each expert (before the capacity cut)."""
        return torch.bincount(self.expert.flatten(), minlength=experts)

    def kept_per_expert(self, experts: int) -> torch.Tensor:
        """Tokens each expert actually processed (at most the capacity)."""
        return torch.bincount(self.expert[self.kept], minlength=experts)


# [start: moe-route]
def route(logits: torch.Tensor, k: int, capacity: int, bias: torch.Tensor | None = None) -> Routing:
    """Top-k routing with GShard's capacity and priority (first choices fill slots first).
    ``bias`` (n_exp,), DeepSeek-V3's balancing bias, takes part in choosing the k experts only."""
    tokens, experts = logits.shape
    probs = logits.softmax(dim=-1)  # (n_tok, n_exp)
    score = probs if bias is None else probs + bias  # the bias chooses, it never weighs
    top_e = score.topk(k, dim=-1).indices  # (n_tok, k)
    top_p = probs.gather(1, top_e)
    gate = top_p / top_p.sum(dim=-1, keepdim=True)
    # one-hot in priority order: all first choices (token order), then all second choices, ...
    onehot = F.one_hot(top_e.t().reshape(-1), experts)  # (k·n_tok, n_exp)
    slot_flat = (onehot.cumsum(dim=0) - 1)[
        torch.arange(k * tokens), top_e.t().reshape(-1)
    ]  # (k·n_tok,)
    slot = slot_flat.view(k, tokens).t()  # (n_tok, k)
    return Routing(top_e, gate, slot, slot < capacity, probs, capacity)


# [end: moe-route]


# [start: moe-bias-update]
def update_bias(bias: torch.Tensor, load: torch.Tensor, gamma: float) -> torch.Tensor:
    """DeepSeek-V3's auxiliary-loss-free step, after each training step: lower an overloaded
    expert's bias by γ, raise an underloaded one's; ``load`` counts the whole step's tokens."""
    return bias + gamma * torch.sign(load.double().mean() - load).to(bias.dtype)
    # [end: moe-bias-update]


def imbalance(load: torch.Tensor) -> float:
    """max/mean of the tokens routed to each expert: 1 when balanced, n_exp when one takes all."""
    return float(load.max() / load.double().mean())


def dropped_at(routed: torch.Tensor, capacity: int) -> int:
    """Choices dropped when each group's experts take ``capacity`` slots: Σ max(0, routed - C)
    over the groups (rows) and experts (columns) of ``routed``; the order of the slots decides
    which choices go, not how many."""
    return int((routed - capacity).clamp(min=0).sum())


def toy_batch(step: int, rank: int, world: int, tokens: int, hidden: int, skew: float):
    """Chapter 9's balancing runs: rank ``rank``'s fresh tokens (T, h) of ``step``, shifted by
    ``skew`` along one direction so a random router prefers a few experts, and their target, a
    fixed function tanh(x W) for the layer to learn (the same W on every rank, seed 7)."""
    g = torch.Generator().manual_seed(100_000 + step * world + rank)
    x = torch.randn(tokens, hidden, generator=g) + skew * torch.ones(hidden) / hidden**0.5
    w = torch.randn(hidden, hidden, generator=torch.Generator().manual_seed(7)) / hidden**0.5
    return x, torch.tanh(x @ w)


def balance_loss(routing: Routing) -> torch.Tensor:
    """Switch Transformer's auxiliary loss E · Σ_i f_i P_i (1 when perfectly balanced)."""
    experts = routing.probs.shape[1]
    first = F.one_hot(routing.expert[:, 0], experts).float().mean(dim=0)  # f_i
    return experts * (first * routing.probs.mean(dim=0)).sum()


def dispatch(x: torch.Tensor, routing: Routing, experts: int) -> torch.Tensor:
    """(T, h) tokens → (E, C, h) expert buffers; empty slots are zeros, dropped tokens are
    absent."""
    cap, h = routing.capacity, x.shape[1]
    kept = routing.kept
    token = torch.arange(x.shape[0], device=x.device).unsqueeze(1).expand_as(kept)[kept]
    where = routing.expert[kept] * cap + routing.slot[kept]
    return x.new_zeros(experts * cap, h).index_add(0, where, x[token]).view(experts, cap, h)


def combine(y: torch.Tensor, routing: Routing) -> torch.Tensor:
    """(E, C, h) expert outputs → (T, h): Σ over a token's kept choices of gate · output."""
    experts, cap, h = y.shape
    where = (routing.expert * cap + routing.slot.clamp(max=cap - 1)).flatten()  # (T·k,)
    picked = y.reshape(experts * cap, h)[where].view(*routing.expert.shape, h)  # (T, k, h)
    weight = (routing.gate * routing.kept).unsqueeze(-1)  # dropped choices weigh 0
    return (picked * weight).sum(dim=1)


def experts_ffn(buffers: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor) -> torch.Tensor:
    """Every expert's FFN at once: (E, C, h) @ (E, h, f) → GELU → @ (E, f, h)."""
    return F.gelu(buffers @ w_in) @ w_out


class PeerBytes:
    """Counts the bytes this rank hands to ``dist.all_to_all_single`` for each other rank of the
    group, per phase (``sent[phase][j]``: to group rank j; the piece for itself stays home), from
    the split sizes of each call: the measured side of the dispatch and combine volumes."""

    def __init__(self):
        self.sent: dict[str, list[int]] = {}
        self.calls: dict[str, int] = {}
        self.phase = "forward"

    def __enter__(self):
        self._original = torch.distributed.all_to_all_single
        torch.distributed.all_to_all_single = self._counted
        return self

    def __exit__(self, *exc):
        torch.distributed.all_to_all_single = self._original

    def _counted(self, output, input, output_split_sizes=None, input_split_sizes=None, **kw):
        group = kw.get("group")
        n, me = torch.distributed.get_world_size(group), torch.distributed.get_rank(group)
        rows = input_split_sizes or [input.shape[0] // n] * n
        row_bytes = input.numel() // max(input.shape[0], 1) * input.element_size()
        to = self.sent.setdefault(self.phase, [0] * n)
        for j, r in enumerate(rows):
            to[j] += 0 if j == me else r * row_bytes
        self.calls[self.phase] = self.calls.get(self.phase, 0) + 1
        return self._original(output, input, output_split_sizes, input_split_sizes, **kw)


def expert_data_grid(world_size: int, ep: int) -> tuple[list[list[int]], list[list[int]]]:
    """(expert groups, data groups) of a dp × ep grid of ranks, the last axis fastest:
    rank = d·ep + e, the order of Colossal-AI's MoeHybridParallelPlugin (moe_dp outside ep, as in
    :class:`helpers.parallel.mesh.RankMesh`). Expert group d is data replica d, its ranks
    splitting the experts; data group e holds the same experts in every replica."""
    if ep < 1 or world_size % ep:
        raise ValueError(f"{world_size} ranks do not form a grid with ep = {ep}")
    dp = world_size // ep
    return (
        [[d * ep + e for e in range(ep)] for d in range(dp)],
        [[d * ep + e for d in range(dp)] for e in range(ep)],
    )


class MoELayer(nn.Module):
    """Router plus E expert FFNs; the expert weights are stacked so a rank can hold a slice."""

    def __init__(
        self,
        hidden: int,
        ffn: int,
        experts: int,
        k: int = 2,
        capacity_factor: float = 1.0,
        seed: int = 0,
    ):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.k, self.capacity_factor, self.experts = k, capacity_factor, experts
        self.router = nn.Parameter(torch.randn(hidden, experts, generator=g) / math.sqrt(hidden))
        self.w_in = nn.Parameter(torch.randn(experts, hidden, ffn, generator=g) / math.sqrt(hidden))
        self.w_out = nn.Parameter(torch.randn(experts, ffn, hidden, generator=g) / math.sqrt(ffn))

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, Routing, torch.Tensor]:
        """x (T, h) of one group → (output (T, h), routing, balancing loss)."""
        cap = expert_capacity(x.shape[0], self.experts, self.k, self.capacity_factor)
        routing = route(x @ self.router, self.k, cap, bias)
        y = experts_ffn(dispatch(x, routing, self.experts), self.w_in, self.w_out)  # (n_exp, C, h)
        return combine(y, routing), routing, balance_loss(routing)


def expert_parallel_forward(
    x: torch.Tensor,
    router: torch.Tensor,
    w_in_local: torch.Tensor,
    w_out_local: torch.Tensor,
    k: int,
    capacity_factor: float,
    group=None,
    bias: torch.Tensor | None = None,
):
    """The same layer with E/P experts per rank: route locally, all-to-all, run, all-to-all back.

    x: this rank's tokens (T, h); router: (h, E), replicated; w_in_local, w_out_local: this rank's
    experts (E/P, h, f), (E/P, f, h), rank r holding experts r·E/P ... (r+1)·E/P - 1.
    """
    # [start: moe-ep-forward]
    ranks = torch.distributed.get_world_size(group)
    experts = w_in_local.shape[0] * ranks
    cap = expert_capacity(x.shape[0], experts, k, capacity_factor)
    routing = route(x @ router, k, cap, bias)
    buffers = dispatch(x, routing, experts)  # (n_exp, C, h): my tokens for every expert
    mine = AllToAll.apply(buffers, 0, 1, group)  # (n_exp/E, E·C, h): all ranks' tokens, my experts
    done = experts_ffn(mine, w_in_local, w_out_local)  # (n_exp/E, E·C, h)
    back = AllToAll.apply(done, 1, 0, group)  # (n_exp, C, h): my tokens' outputs, every expert
    return combine(back, routing), routing, balance_loss(routing)
    # [end: moe-ep-forward]
