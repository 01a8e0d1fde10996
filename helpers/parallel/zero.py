"""ZeRO stage 1 bookkeeping: the padded flat buffer, its shards, the Adam step, bytes held and sent.

Used by Chapter 7's from-scratch ZeRO-1 demo (``helpers/demos/ch07_zero1.py``). ZeRO-1
(Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
§5.1, P_os) keeps the full weights and gradients on every data-parallel rank but splits the
optimizer states: the Ψ parameters are laid out in one flat buffer, padded to a multiple of N_d, and
rank r owns the slice [r·s, (r+1)·s) with s = ceil(Ψ/N_d). Only the owner keeps Adam's m and v for
its slice, so a rank holds 8·s bytes of fp32 Adam state instead of 8Ψ: the memory model's 8Ψ/N_d
plus 8·pad/N_d bytes for the padding (:func:`helpers.cost.memory.predicted_optimizer_bytes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class FlatLayout:
    """Ψ parameters in a flat buffer padded to N_d equal shards of ``shard`` elements."""

    numel: int  # Ψ, the real parameters
    world: int  # N_d, the data-parallel degree
    shard: int  # s = ceil(Ψ / N_d), elements per rank
    padded: int  # N_d · s
    pad: int  # padded - Ψ, zeros at the end of the last shard

    def owned(self, rank: int) -> slice:
        """The slice of the flat buffer whose optimizer states ``rank`` keeps."""
        if not 0 <= rank < self.world:
            raise ValueError(f"rank {rank} is outside a data-parallel group of {self.world}")
        return slice(rank * self.shard, (rank + 1) * self.shard)


def flat_layout(numel: int, world: int) -> FlatLayout:
    """Pad Ψ = ``numel`` up to a multiple of N_d = ``world`` so every rank owns ``ceil(Ψ/N_d)``
    elements."""
    for name, value in (("numel", numel), ("world", world)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if numel < world:
        raise ValueError(
            f"{numel} parameters cannot be sharded over {world} ranks: every rank must own at "
            f"least one parameter (use fewer ranks or a bigger model)"
        )
    shard = math.ceil(numel / world)
    if (world - 1) * shard >= numel:
        raise ValueError(
            f"{numel} parameters over {world} ranks leave the last rank only padding "
            f"(shard {shard}); use fewer ranks or a bigger model"
        )
    return FlatLayout(numel, world, shard, shard * world, shard * world - numel)


def comm_bytes_per_step(layout: FlatLayout, element_size: int) -> dict[str, int]:
    """Bytes one rank sends per step with ring collectives on the padded flat buffer of S bytes.

    Reduce-scatter of the gradients sends (N-1)/N·S, all-gather of the updated parameters another
    (N-1)/N·S: together 2(N-1)/N·S, exactly one all-reduce of the same buffer (ZeRO §7.2.1).
    """
    chunk = layout.shard * element_size  # S / N
    n = layout.world
    return dict(
        reduce_scatter=(n - 1) * chunk,
        all_gather=(n - 1) * chunk,
        total=2 * (n - 1) * chunk,
        all_reduce=2 * (n - 1) * chunk,
        buffer=layout.padded * element_size,
    )


@torch.no_grad()
def adam_step_(
    param: torch.Tensor,
    grad: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    step: int,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> None:
    """One Adam update in place, in the operation order of ``torch.optim.Adam`` (no weight decay,
    no amsgrad).

    ``step`` counts from 1. On equal inputs the result is bitwise that of torch's single-tensor
    Adam.
    """
    if step < 1:
        raise ValueError(f"Adam's step counts from 1, got {step}")
    beta1, beta2 = betas
    m.lerp_(grad, 1 - beta1)
    v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr / (1 - beta1**step)
    denom = (v.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    param.addcdiv_(m, denom, value=-step_size)


class Zero1Adam:
    """ZeRO-1 Adam for a list of tensors over one data-parallel group, in three collectives a step.

    Used by Chapter 2's 3-D demo (``helpers/demos/ch02_3d.py --optimizer zero1``), where the tensors
    are a rank's own tensor- and pipeline-parallel shards and the group is its data group: the
    gradients are laid out in a padded flat buffer (:func:`flat_layout`), reduce-scattered and
    averaged, this rank's slice takes an Adam step with its own m and v (:func:`adam_step_`), and
    the updated slices are all-gathered back into every replica's tensors.
    """

    def __init__(self, tensors: list[torch.Tensor], group, lr: float) -> None:
        import torch.distributed as dist

        self.tensors, self.group, self.lr, self.step_count = tensors, group, lr, 0
        self.world, rank = dist.get_world_size(group), dist.get_rank(group)
        self.layout = flat_layout(sum(t.numel() for t in tensors), self.world)
        self.own = self.layout.owned(rank)
        self.m = torch.zeros(
            self.layout.shard, device=tensors[0].device
        )  # (shard,) my slice's Adam state only
        self.v = torch.zeros_like(self.m)

    def _flat(self, parts: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.zeros(self.layout.padded, device=self.m.device)  # (N·shard,)
        flat[: self.layout.numel] = torch.cat([p.reshape(-1) for p in parts])
        return flat

    # [start: zero1-step]
    @torch.no_grad()
    def step(self) -> None:
        import torch.distributed as dist

        grads = self._flat([t.grad for t in self.tensors])
        mine = torch.empty_like(self.m)
        dist.reduce_scatter_tensor(
            mine, grads, group=self.group
        )  # sum of my slice over the replicas
        mine /= self.world
        weights = self._flat([t for t in self.tensors])
        self.step_count += 1
        adam_step_(weights[self.own], mine, self.m, self.v, self.step_count, self.lr)
        dist.all_gather_into_tensor(weights, weights[self.own].clone(), group=self.group)
        offset = 0
        for t in self.tensors:
            t.copy_(weights[offset : offset + t.numel()].view_as(t))
            t.grad = None
            offset += t.numel()

    # [end: zero1-step]
