"""Measuring the seed's communication share of a real training step, with communication
switchable off.

Used by Chapter 3 (the 0.5 rule) through ``helpers/demos/ch03_share.py``
(:mod:`helpers.train.share_cases`). The seed (策略选择方法)
judges a layout by share = t_comm / (t_comm + t_compute) and, above 0.5, advises lowering tensor
parallelism, raising the batch, or overlapping communication with computation
(:func:`helpers.cost.comm.comm_share`). To *measure* the two times on a real step, every layout
here can run the very same step with its communication switched off:

* t_compute = the step time with communication off (same kernels, same shapes, no collective),
* t_comm = the step time with communication on minus t_compute: the *exposed* communication,
  the part of it that computation did not hide. This is what the rule needs; the time NCCL
  kernels run (e.g. torch.profiler's kernel time) would also count communication that overlapped.

On GPUs :func:`nccl_kernel_times` also reads the GPU's clock (torch.profiler/CUPTI through
:class:`helpers.train.signals.KernelTimer`): the time NCCL kernels run per step and the part of it
no other kernel overlaps. With overlap the first exceeds the second; the step-time difference above
is the one the share uses.

Three layouts over the whole world of ranks:

* ``tp``: Megatron tensor parallelism of a Hugging Face Llama (Shoeybi et al. 2019, §3): q/k/v and
  gate/up projections split by output rows (whole heads per rank), o/down projections by input
  columns; f enters and g leaves each attention and MLP block (:mod:`helpers.parallel.tp`), so 2
  all-reduces of b·s·h per layer forward and 2 backward. Embeddings, norms and the head stay
  replicated.
* ``dp``: data parallelism with every gradient in one flat buffer, all-reduced once after backward
  (no overlap).
* ``ddp``: torch DistributedDataParallel, whose gradient buckets are all-reduced *during* backward
  (overlap); with communication off it runs under ``no_sync()``.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn

from helpers.run.env import sync
from helpers.parallel.tp import f, g, shard
from helpers.train.signals import KernelTimer

LAYOUTS = ("tp", "dp", "ddp")


class CommSwitch:
    """One flag shared by the tensor-parallel wrappers: communicate, or do the same work without."""

    def __init__(self) -> None:
        self.on = True


class _Enter(nn.Module):
    """Megatron's f (identity forward, all-reduce of the gradient backward), or identity when
    off."""

    def __init__(self, switch: CommSwitch, group=None) -> None:
        super().__init__()
        self.switch, self.group = switch, group

    def forward(self, x):
        return f(x, self.group) if self.switch.on else x


class _Leave(_Enter):
    """Megatron's g (all-reduce of the partial sums forward, identity backward), or identity when
    off."""

    def forward(self, x):
        return g(x, self.group) if self.switch.on else x


def _keep(linear: nn.Linear, dim: int, rank: int, size: int) -> None:
    linear.weight = nn.Parameter(
        shard(linear.weight, dim, rank, size)
    )  # dim 0: rows (outputs), 1: columns


def tensor_parallel_llama(model, rank: int, size: int, switch: CommSwitch, group=None):
    """Split every decoder layer of a ``LlamaForCausalLM`` over ``size`` ranks in place (Megatron
    TP).

    transformers' Llama attention reshapes with ``view(*shape, -1, head_dim)``, so a projection that
    keeps H/size query heads and KV/size key-value heads just runs on its own heads.
    """
    config = model.config
    if (
        config.num_attention_heads % size
        or config.num_key_value_heads % size
        or config.intermediate_size % size
    ):
        raise ValueError(
            f"heads {config.num_attention_heads}, KV heads {config.num_key_value_heads} and MLP "
            f"width {config.intermediate_size} must all be divisible by tp={size}"
        )
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
            _keep(lin, 0, rank, size)  # column-parallel: (out/size, h)
        for lin in (attn.o_proj, mlp.down_proj):
            _keep(lin, 1, rank, size)  # row-parallel: (h, in/size), a partial sum
        layer.input_layernorm = nn.Sequential(layer.input_layernorm, _Enter(switch, group))
        layer.post_attention_layernorm = nn.Sequential(
            layer.post_attention_layernorm, _Enter(switch, group)
        )
        attn.o_proj = nn.Sequential(attn.o_proj, _Leave(switch, group))
        mlp.down_proj = nn.Sequential(mlp.down_proj, _Leave(switch, group))
    return model


def flat_gradients(model) -> torch.Tensor:
    """Point every ``.grad`` into one flat buffer (backward accumulates in place), and return it."""
    params = [p for p in model.parameters() if p.requires_grad]
    flat = torch.zeros(
        sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device
    )
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    return flat


class Trainer:
    """One layout's training step with communication switchable on and off."""

    def __init__(
        self, layout: str, model, world_size: int, lr: float = 1e-4, bucket_cap_mb: float = 25.0
    ):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
        self.layout, self.world_size, self.switch = layout, world_size, CommSwitch()
        rank = dist.get_rank()
        if layout == "tp":
            model = tensor_parallel_llama(model, rank, world_size, self.switch)
        elif layout == "ddp":
            device = next(model.parameters()).device
            model = nn.parallel.DistributedDataParallel(
                model,
                device_ids=[device] if device.type == "cuda" else None,
                bucket_cap_mb=bucket_cap_mb,
            )
        self.model = model
        self.flat = flat_gradients(model) if layout == "dp" else None
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr, foreach=True)

    def step(self, batch: dict[str, torch.Tensor], communicate: bool = True) -> torch.Tensor:
        """Forward, backward, (communication), optimizer step; returns the loss."""
        self.switch.on = communicate
        if self.layout == "ddp" and not communicate:
            with self.model.no_sync():  # covers forward too: DDP arms its hooks there
                loss = self.model(**batch).loss
                loss.backward()
        else:
            loss = self.model(**batch).loss
            loss.backward()
        if self.layout == "dp" and communicate:
            dist.all_reduce(self.flat)  # one message of every gradient, after backward
            self.flat.div_(self.world_size)
        self.opt.step()
        self.model.zero_grad(
            set_to_none=self.layout != "dp"
        )  # dp: keep the views into the flat buffer
        return loss.detach()


def time_steps(trainer: Trainer, batches, communicate: bool, device: torch.device) -> list[float]:
    """Seconds of each step, the slowest rank's (a step ends when its last rank does)."""
    times = []
    for batch in batches:
        dist.barrier()
        sync(device)
        t0 = time.perf_counter()
        trainer.step(batch, communicate)
        sync(device)
        times.append(time.perf_counter() - t0)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.tolist()


def replicas_agree(model, layout: str) -> bool:
    """Do the parameters every rank should hold identically (all of them for dp/ddp; embeddings,
    norms and head for tp) agree bit for bit across ranks?"""
    module = getattr(model, "module", model)  # DDP wraps the model
    shared = [p for n, p in module.named_parameters() if layout != "tp" or "_proj" not in n]
    local = torch.stack(
        [p.detach().double().sum() for p in shared]
        + [p.detach().double().abs().sum() for p in shared]
    )
    low, high = local.clone(), local.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    return bool(torch.equal(low, high))


def nccl_kernel_times(trainer, batches, dev) -> dict:
    """GPU only: per step, the time NCCL kernels run (busy) and the part no other kernel overlaps
    (exposed), from torch.profiler/CUPTI (:class:`helpers.train.signals.KernelTimer`); {} on the
    CPU."""
    if dev.type != "cuda" or not batches:
        return {}

    timer = KernelTimer()
    try:
        sync(dev)
        timer.start()
        for b in batches:
            trainer.step(b)
        sync(dev)
    except Exception as err:  # the timing above stands without it
        return {"kernel_error": repr(err)[:300]}
    finally:
        timer.stop()  # an active CUPTI session crashes interpreter teardown (Chapter 5)
    return {
        "nccl_busy_s": timer.busy_s / len(batches),
        "nccl_exposed_s": timer.wait_s / len(batches),
    }
