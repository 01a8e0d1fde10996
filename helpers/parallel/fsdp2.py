"""PyTorch FSDP2 as Chapters 6 and 8 compare it with Colossal-AI: the same step, ``fully_shard``.

Used by :mod:`helpers.demos.ch08_train` (``--framework fsdp2``) and so by the comparison of
Chapter 6 and the flagship benchmark (:mod:`helpers.record.flagship`). FSDP2
(``torch.distributed.fsdp.fully_shard``, PyTorch ≥ 2.6) shards every parameter as a DTensor over
the data-parallel ranks — ZeRO-3 in the ZeRO paper's terms: each decoder layer's weights are
all-gathered just before its forward and its backward and freed after, and the gradients are
reduce-scattered. With a mixed-precision policy the gathered weights are bf16 while the sharded
masters and the optimizer stay fp32.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from helpers.models.llama import shard_batch, token_batch


class FSDP2Trainer:
    """``fully_shard`` on every decoder layer and on the root; one optimizer step per call of
    :meth:`step`.

    ``make_optimizer(model)`` builds the optimizer after sharding (it must see the DTensor
    shards)."""

    def __init__(self, layout, model, make_optimizer, device, dtype: torch.dtype):
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mp = (
            MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
            if dtype != torch.float32
            else None
        )
        kw = {"mp_policy": mp} if mp else {}
        for layer in model.model.layers:
            fully_shard(layer, **kw)
        fully_shard(model, **kw)
        self.layout, self.model, self.device = layout, model, device
        self.opt = make_optimizer(model)
        self.dp_rank, self.dp_size = dist.get_rank(), dist.get_world_size()

    def step(self, k: int) -> float:
        full = token_batch(k, self.layout.global_batch, self.layout.seq, self.layout.shape.vocab)
        batch = {
            n: t.to(self.device) for n, t in shard_batch(full, self.dp_rank, self.dp_size).items()
        }
        loss = self.model(**batch).loss
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        return float(loss.detach().float())
