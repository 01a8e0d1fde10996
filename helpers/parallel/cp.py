"""Context parallelism from scratch: ring attention, its zigzag layout, and what a rank sends.

Used by Chapter 9, "Context parallelism: ring attention", through the demo
``helpers/demos/ch09_ring_attention.py`` and the notebook glue
``helpers/chapters/ch09_context_parallel.py``.

Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers for Near-Infinite
Context", Sec. 3) keeps queries, keys and values split along the sequence over S ranks. Each rank
computes attention of its queries against one block of keys and values at a time, passes that
block to the next rank of the ring and receives one from the previous, S steps in all. The
partial results are merged with the online-softmax rule of flash attention (Dao et al. 2022,
Sec. 3.1): with the log-sum-exp ``lse`` of each query's scores,

    lse = log(exp(lse_1) + exp(lse_2)),  out = exp(lse_1 - lse) out_1 + exp(lse_2 - lse) out_2.

The sequence is cut into 2S equal chunks and every rank holds two of them: chunks 2i and 2i+1
("contiguous") or chunks i and 2S-1-i ("zigzag", the layout of Colossal-AI's
``split_batch_zigzag``, ``colossalai/shardformer/layer/utils.py:331`` in 0.5.0). Under a causal
mask a chunk pair (query chunk q, key chunk k) is computed whole when k < q, with the triangular
mask when k = q, and skipped when k > q; :func:`step_work` counts the pairs each rank computes at
each ring step.

The backward is an explicit ring (:class:`RingAttention`), not autograd through the forward:
each rank keeps only its own q, k, v, output and lse; the key/value blocks go round the ring
again, and with them the accumulating gradients dK, dV, which after S steps are back at their
owner. Autograd through the forward would keep every received block, S times the memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

LAYOUTS = ("contiguous", "zigzag")


def chunks_of(rank: int, world: int, layout: str) -> tuple[int, int]:
    """The two chunks (of 2·world) that ``rank`` holds: (2i, 2i+1) or zigzag (i, 2·world-1-i)."""
    if layout == "contiguous":
        return (2 * rank, 2 * rank + 1)
    if layout == "zigzag":
        return (rank, 2 * world - 1 - rank)
    raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")


def positions(rank: int, world: int, seq: int, layout: str) -> torch.Tensor:
    """The token positions ``rank`` holds, in the order it holds them."""
    if seq % (2 * world):
        raise ValueError(f"sequence length {seq} is not divisible by 2 x {world} chunks")
    c = seq // (2 * world)
    return torch.cat([torch.arange(i * c, (i + 1) * c) for i in chunks_of(rank, world, layout)])


def pair_kind(q_chunk: int, k_chunk: int) -> str | None:
    """Causal attention of one query chunk on one key chunk: "full", "diagonal" or None (skip)."""
    return "full" if k_chunk < q_chunk else "diagonal" if k_chunk == q_chunk else None


def source(rank: int, step: int, world: int) -> int:
    """Whose key/value block ``rank`` holds at ring step ``step`` (it moves one rank per step)."""
    return (rank - step) % world


def step_work(world: int, layout: str) -> list[list[int]]:
    """Chunk pairs computed by each rank (rows) at each ring step (columns), causal mask."""
    return [
        [
            sum(
                pair_kind(qc, kc) is not None
                for qc in chunks_of(r, world, layout)
                for kc in chunks_of(source(r, t, world), world, layout)
            )
            for t in range(world)
        ]
        for r in range(world)
    ]


def critical_path(work: list[list[int]]) -> int:
    """Chunk pairs on the critical path: each ring step waits for its slowest rank."""
    return sum(max(col) for col in zip(*work))


def ring_bytes(b: int, s: int, h_kv: int, ranks: int, e: int = 2, backward: bool = False) -> int:
    """Bytes one rank sends in one layer's ring attention over S = ``ranks``, in the forward pass
    (``backward=False``) or in the backward pass.

    Forward: the K and V block, b·(s/S)·h_kv elements each, S-1 times. Backward: K and V again
    S-1 times, and the gradients dK, dV S times (the last send returns them to their owner; a
    ring of one rank sends nothing).
    """
    block = b * (s // ranks) * h_kv * e  # one of K, V, dK, dV on one rank
    return 2 * block * (ranks - 1) + (2 * block * ranks if backward and ranks > 1 else 0)


def overlap_tokens(
    peak_flops: float,
    bandwidth: float,
    e: int = 2,
    kv_share: float = 1.0,
    computed_share: float = 1.0,
) -> float:
    """Tokens per rank s/S above which one ring step's attention takes longer than sending its
    K and V block, so the transfer can hide behind the computation.

    A step computes 4·n²·d FLOPs per head (QKᵀ and PV, n = s/S) times ``computed_share`` (1/2 for
    a zigzag causal step, two of four chunk pairs), and sends 2·n·d·e bytes per key/value head
    (``kv_share`` = kv heads / heads): n ≥ kv_share·e·F / (2·computed_share·B).
    """
    return kv_share * e * peak_flops / (2 * computed_share * bandwidth)


@dataclass
class Ring:
    """The ring of one process group: who sends to whom, and the bytes this rank sent."""

    group: object = None
    sent: dict[str, int] = field(default_factory=dict)
    work: list[int] = field(default_factory=list)  # chunk pairs computed per forward step

    def __post_init__(self):
        self.rank, self.world = dist.get_rank(self.group), dist.get_world_size(self.group)
        peer = lambda r: dist.get_global_rank(self.group, r) if self.group else r  # noqa: E731
        self.next, self.prev = (
            peer((self.rank + 1) % self.world),
            peer((self.rank - 1) % self.world),
        )

    def start(self, tensor: torch.Tensor, phase: str):
        """Send ``tensor`` to the next rank and receive its like from the previous one, without
        waiting (``batch_isend_irecv``); returns a function that waits and gives the received.
        A ring of one rank sends nothing: the tensor comes straight back."""
        self.sent.setdefault(phase, 0)
        if self.world == 1:
            return lambda: tensor
        tensor = tensor.contiguous()
        got = torch.empty_like(tensor)
        ops = [
            dist.P2POp(dist.isend, tensor, self.next, self.group),
            dist.P2POp(dist.irecv, got, self.prev, self.group),
        ]
        reqs = dist.batch_isend_irecv(ops)
        self.sent[phase] += tensor.numel() * tensor.element_size()

        def wait() -> torch.Tensor:
            for req in reqs:
                req.wait()
            return got

        return wait


def _chunks(x: torch.Tensor) -> list[torch.Tensor]:
    return list(x.chunk(2, dim=1))  # (b, 2c, a, d) -> two (b, c, a, d)


def _scores(q, k, kind: str, scale: float) -> torch.Tensor:
    s = torch.einsum("bnad,bmad->banm", q, k) * scale  # (b, a, c, c)
    if kind == "diagonal":
        n = s.shape[-1]
        future = torch.ones(n, n, dtype=torch.bool, device=s.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    return s


def _pairs(ring: Ring, layout: str, step: int):
    """(my chunk index, their chunk index, kind) of the chunk pairs computed at ``step``."""
    mine = chunks_of(ring.rank, ring.world, layout)
    theirs = chunks_of(source(ring.rank, step, ring.world), ring.world, layout)
    for i, qc in enumerate(mine):
        for j, kc in enumerate(theirs):
            if (kind := pair_kind(qc, kc)) is not None:
                yield i, j, kind


# [start: ring-forward]
def ring_forward(q, k, v, ring: Ring, layout: str):
    """This rank's causal attention output (b, 2c, a, d) and lse (b, a, 2c): S ring steps, each
    computing against the key/value block in hand while the next one is on its way."""
    scale = 1 / math.sqrt(q.shape[-1])
    qs = _chunks(q)
    out = [torch.zeros_like(x) for x in qs]
    b, c, a, _ = qs[0].shape
    lse = [torch.full((b, a, c), -math.inf, dtype=q.dtype, device=q.device) for _ in qs]
    kv = torch.stack((k, v))  # (2, b, 2c, a, d)
    ring.work = []
    for t in range(ring.world):
        incoming = ring.start(kv, "forward") if t < ring.world - 1 else None
        ks, vs = _chunks(kv[0]), _chunks(kv[1])
        pairs = list(_pairs(ring, layout, t))
        for i, j, kind in pairs:
            s = _scores(qs[i], ks[j], kind, scale)
            blk_lse = s.logsumexp(-1)  # (b, a, c)
            blk_out = torch.einsum("banm,bmad->bnad", (s - blk_lse[..., None]).exp(), vs[j])
            new = torch.logaddexp(lse[i], blk_lse)  # the online-softmax merge
            w_old, w_blk = ((x - new).exp().transpose(1, 2)[..., None] for x in (lse[i], blk_lse))
            out[i], lse[i] = w_old * out[i] + w_blk * blk_out, new
        ring.work.append(len(pairs))
        if incoming is not None:
            kv = incoming()
    return torch.cat(out, dim=1), torch.cat(lse, dim=2)


# [end: ring-forward]


# [start: ring-backward]
def ring_backward(dout, q, k, v, out, lse, ring: Ring, layout: str):
    """dQ, dK, dV of this rank: the key/value blocks go round again, and with them their
    accumulating gradients, which the S-th send hands back to the block's owner."""
    scale = 1 / math.sqrt(q.shape[-1])
    qs, dos, lses = _chunks(q), _chunks(dout), list(lse.chunk(2, dim=2))
    deltas = [(o * d).sum(-1).transpose(1, 2) for o, d in zip(_chunks(out), dos)]  # (b, a, c)
    dq = [torch.zeros_like(x) for x in qs]
    kv, dkv = torch.stack((k, v)), torch.zeros(2, *k.shape, dtype=k.dtype, device=k.device)
    for t in range(ring.world):
        incoming = ring.start(kv, "backward") if t < ring.world - 1 else None
        ks, vs = _chunks(kv[0]), _chunks(kv[1])
        dks, dvs = _chunks(dkv[0]), _chunks(dkv[1])
        for i, j, kind in _pairs(ring, layout, t):
            p = (_scores(qs[i], ks[j], kind, scale) - lses[i][..., None]).exp()  # (b, a, c, c)
            dvs[j] += torch.einsum("banm,bnad->bmad", p, dos[i])
            dp = torch.einsum("bnad,bmad->banm", dos[i], vs[j])
            ds = p * (dp - deltas[i][..., None])
            dq[i] += torch.einsum("banm,bmad->bnad", ds, ks[j]) * scale
            dks[j] += torch.einsum("banm,bnad->bmad", ds, qs[i]) * scale  # views into dkv
        kv = incoming() if incoming is not None else kv
        dkv = ring.start(dkv, "backward")()  # to the next rank, the next block's from the previous
    return torch.cat(dq, dim=1), dkv[0], dkv[1]


# [end: ring-backward]


class RingAttention(torch.autograd.Function):
    """Causal ring attention on this rank's (b, 2c, a, d) q, k, v, with the explicit ring
    backward of :func:`ring_backward`."""

    @staticmethod
    def forward(ctx, q, k, v, ring: Ring, layout: str):
        out, lse = ring_forward(q, k, v, ring, layout)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.layout = ring, layout
        return out

    @staticmethod
    def backward(ctx, dout):
        dq, dk, dv = ring_backward(dout, *ctx.saved_tensors, ctx.ring, ctx.layout)
        return dq, dk, dv, None, None


def ring_attention(q, k, v, ring: Ring, layout: str = "zigzag") -> torch.Tensor:
    """Causal attention over the whole sequence for the tokens this rank holds."""
    return RingAttention.apply(q, k, v, ring, layout)


class AllToAllCounter:
    """Counts the bytes this rank hands to ``dist.all_to_all_single`` for other ranks, per phase
    (the piece for itself stays): the measured side of the Ulysses comparison."""

    def __init__(self):
        self.sent: dict[str, int] = {}
        self.phase = "forward"

    def __enter__(self):
        self._original = dist.all_to_all_single
        dist.all_to_all_single = self._counted
        return self

    def __exit__(self, *exc):
        dist.all_to_all_single = self._original

    def _counted(self, output, input, *args, group=None, **kwargs):
        n = dist.get_world_size(group)
        mine = input.numel() * input.element_size() * (n - 1) // n  # equal splits
        self.sent[self.phase] = self.sent.get(self.phase, 0) + mine
        return self._original(output, input, *args, group=group, **kwargs)
