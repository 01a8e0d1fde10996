"""Chapter 8, "Hang forensics": the two hanging programs of :mod:`helpers.demos.ch08_flight`.

:func:`skip_loop` is Chapter 8's collective-mismatch lab (``helpers.train.faults.failing_loop``,
mode ``skip``) on any device. :func:`pipeline_step` runs one rank's part of a 1F1B pipeline step
with point-to-point messages, one process group per link
(:func:`helpers.parallel.pp_runtime.links`, whose :class:`~helpers.parallel.pp_runtime.Chunk`
computes), under :func:`naive_1f1b` or the book's
:func:`helpers.parallel.pp_schedules.one_f_one_b`. :func:`rule_says` asks the book's layout rule
"at least as many micro-batches as stages" (:data:`helpers.parallel.layout_rules.LAYOUT_RULES`)
about a pipeline, so that the lab can refuse it or run it on purpose.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from helpers.parallel import pp_runtime
from helpers.parallel.case import Case
from helpers.parallel.layout_rules import LAYOUT_RULES
from helpers.parallel.pp_schedules import Action, one_f_one_b

RULE = "at least as many micro-batches as stages"
SKIP_RANK, SKIP_STEP = 1, 1  # the rank that skips, and the step whose all-reduces it skips
PARAMS_PER_STEP = 4  # skip_loop's parameter tensors: one all-reduce each per step
H, ROWS = 16, 4  # the pipeline's width and rows per micro-batch
SCHEDULES = {"naive": None, "capped": one_f_one_b}  # naive_1f1b is filled in below


def rule_says(stages: int, micro: int) -> str:
    """The rule's reason when P = ``stages`` and m = ``micro`` break it, else ""."""
    rule = next(r for r in LAYOUT_RULES if r.name == RULE)
    case = Case(dp=1, pp=stages, microbatches=micro)
    return rule.reason(case) if rule.broken(case) else ""


def skip_loop(env, steps: int, done: list) -> None:
    """Chapter 8's failing loop (``helpers.train.faults.failing_loop``, mode ``skip``) on the
    rank's device: rank ``SKIP_RANK`` skips step ``SKIP_STEP``'s all-reduces; then every rank's
    closing barrier."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    model.to(env.device)
    g = torch.Generator().manual_seed(1 + env.rank)
    for step in range(steps):
        x = torch.randn(16, 32, generator=g).to(env.device)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
        loss.backward()
        if not (env.rank == SKIP_RANK and step == SKIP_STEP):
            for p in model.parameters():
                dist.all_reduce(p.grad)
        model.zero_grad()
        done.append(f"step {step}")
    dist.barrier()
    done.append("barrier")


# [start: naive-1f1b]
def naive_1f1b(p: int, m: int) -> list[list[Action]]:
    """1F1B with the cool-down's length taken from the formula, P-1-s, not from the number of
    forwards still waiting for their backward: right for m ≥ P-1, one backward too many per
    missing micro-batch below that."""
    out = one_f_one_b(p, m)
    for s, acts in enumerate(out):
        warm = min(p - 1 - s, m)  # the warm-up's forwards, whose backwards end the step
        acts[len(acts) - warm :] = [Action("BW", m - warm + i) for i in range(p - 1 - s)]  # bug
    return out
    # [end: naive-1f1b]


def pipeline_step(env, actions: list[Action], m: int, done: list) -> None:
    """This stage's actions with blocking receives and non-blocking sends, one group per link
    (:func:`helpers.parallel.pp_runtime.links`); then the all-reduce of the step's loss."""
    s, p, dev = env.rank, env.world_size, env.device
    groups = pp_runtime.links(p, 1)
    torch.manual_seed(0)
    blocks = [(torch.randn(H, H) / H**0.5, torch.zeros(H)) for _ in range(2)]
    chunk = pp_runtime.Chunk([(w.to(dev), b.to(dev)) for w, b in blocks])
    xs = [
        torch.randn(ROWS, H, generator=torch.Generator().manual_seed(i)).to(dev) for i in range(m)
    ]
    sends, grads, loss = [], {}, torch.zeros(1, device=dev)
    for a in actions:
        if a.kind == "F":
            x = xs[a.mb] if s == 0 else _recv(groups[(s - 1, "fwd")], s - 1, dev)
            y = chunk.forward(a.mb, x)
            if s == p - 1:
                loss += (y * y).sum() / m
                grads[a.mb] = 2 * y / m
            else:
                sends.append(dist.isend(y.contiguous(), s + 1, group=groups[(s, "fwd")]))
        else:
            g = grads.pop(a.mb) if s == p - 1 else _recv(groups[(s, "bwd")], s + 1, dev)
            g_x = chunk.backward_input(a.mb, g)
            chunk.backward_weight(a.mb)
            if s > 0:
                sends.append(dist.isend(g_x.contiguous(), s - 1, group=groups[(s - 1, "bwd")]))
        done.append(a.label())
    for work in sends:
        work.wait()
    dist.all_reduce(loss)  # the step's loss, summed over the stages
    done.append("all_reduce")


def _recv(group, src: int, device) -> torch.Tensor:
    buf = torch.empty(ROWS, H, device=device)
    dist.recv(buf, src=src, group=group)
    return buf


SCHEDULES["naive"] = naive_1f1b
