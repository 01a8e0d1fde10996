"""Chapter 8's node faults and Chapter 5's elastic restart: a tiny data-parallel job whose final
weights can be compared bit for bit with a one-process reference.

Used by ``helpers/demos/ch08_nodes.py``: the job, started by torchrun across hosts, and with
``--reference`` its one-process reference, which ``helpers/cluster/node_faults.py`` compares with.

Every step each rank draws its own batch from (seed, step, rank) alone (:func:`batch`) and
computes its gradient (:func:`grad_of`); the gradients are all-gathered and summed in rank order
(:func:`apply`), so the order of the sum is fixed and :func:`reference` (one process computing
every rank's gradient in turn) gives the same bits. Checkpoints are one file per save,
``step_XXXXXXXX.pt`` (weights, momentum, step), written to a temporary name and renamed
(:func:`save`: ``os.replace`` is atomic), so a checkpoint that exists is whole and :func:`latest`
never picks half a file.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import torch

CKPT = re.compile(r"^step_(\d{8})\.pt$")


def make_model(seed: int) -> torch.nn.Module:
    """The job's model: 16 → 32 → 1 with a tanh, the same weights on every rank."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """SGD with momentum: a state that a resume must restore, not only the weights."""
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batch(seed: int, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s batch of step ``step``: a function of (seed, step, rank) alone."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    x = torch.randn(8, 16, generator=g)
    return x, x[:, :1].sin() + 0.1 * torch.randn(8, 1, generator=g)


def grad_of(model, seed: int, step: int, rank: int) -> tuple[torch.Tensor, float]:
    """This rank's gradient, flattened, and its loss."""
    x, y = batch(seed, step, rank)
    loss = torch.nn.functional.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([g.reshape(-1) for g in grads]), loss.item()


def apply(model, opt, gathered: list[torch.Tensor]) -> None:
    """Average the ranks' gradients (summed in rank order) and take one optimizer step."""
    mean = torch.stack(gathered).sum(0) / len(gathered)
    offset = 0
    for p in model.parameters():
        p.grad = mean[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    opt.step()


def weights_hash(model) -> str:
    """sha256 of the weights' bytes, parameter by parameter."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def reference(world: int, steps: int, seed: int) -> str:
    """The hash of the final weights of ``steps`` fault-free steps of a ``world``-rank job, in one
    process: every rank's gradient computed in turn and summed in rank order, as the job does."""
    model = make_model(seed)
    opt = make_optimizer(model)
    for step in range(steps):
        apply(model, opt, [grad_of(model, seed, step, r)[0] for r in range(world)])
    return weights_hash(model)


def latest(ckpt_dir: Path) -> Path | None:
    """The newest whole checkpoint in ``ckpt_dir``, or None."""
    found = sorted(p for p in ckpt_dir.glob("step_*.pt") if CKPT.match(p.name))
    return found[-1] if found else None


def save(ckpt_dir: Path, step: int, model, opt) -> None:
    """``step_XXXXXXXX.pt`` through a ``.part`` file and one rename."""
    final = ckpt_dir / f"step_{step:08d}.pt"
    part = final.with_name(final.name + ".part")
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, part)
    os.replace(part, final)


def resume(ckpt_dir: Path | None, model, opt) -> tuple[int, Path | None]:
    """Load the newest checkpoint of ``ckpt_dir`` into ``model`` and ``opt``: (its step, its
    path), or (0, None) when there is none."""
    found = latest(ckpt_dir) if ckpt_dir else None
    if found is None:
        return 0, None
    state = torch.load(found)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["step"], found
