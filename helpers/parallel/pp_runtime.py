"""Run a pipeline schedule on one rank with point-to-point messages, and time every event.

Chapter 1, "Pipeline schedules"; used by ``helpers/demos/ch01_pp_schedules.py``. A stage holds
one :class:`Chunk` per model chunk: blocks ``y = tanh(x Wᵀ + b)`` with a backward written out by
hand, so the zero-bubble split is exact and cheap. For one block with ``g_z = g_y ⊙ (1 - y²)``:

- F: ``z = x Wᵀ + b``, ``y = tanh z`` (one matmul);
- B: ``g_x = g_z W`` (one matmul), the input gradient the previous stage waits for;
- W: ``g_W += g_zᵀ x``, ``g_b += Σ g_z`` (one matmul), which nobody waits for.

So F, B and W cost one matmul each, the equal costs that ZB-H1's formula assumes (Qi et al. 2024,
§3.1). A whole backward BW is B then W.

Messages: a forward activation goes from virtual stage k to k+1, a gradient from k+1 to k. Each
of these links, in each direction, gets a process group of its own (:func:`links`), so the
messages on one group always arrive in the order they were sent, as NCCL requires; sends are
``isend`` (a stage never blocks on its own send), receives block (the wait *is* the bubble).

Two clocks. The wall clock times every event as it happened. It measures the bubble only where
every stage has a processor of its own (a GPU per rank); with 4 stages on 2 CPU cores it also
measures the operating system's time-sharing. So each stage also keeps a *stage clock* (a Lamport
clock, Lamport 1978): it advances by the cost of each computation (the thread's CPU time on a
CPU, the synchronised wall time on a GPU), every message carries its sender's clock, and a
receive moves the receiver's clock up to it. The stage clock is the run's timeline on a machine
with one processor per stage and free messages: real costs, real dependencies, no time-sharing.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from helpers.parallel.pp_schedules import KIND_NAMES, Action, stage_of, virtual_stage


class Chunk:
    """The blocks of one virtual stage, with hand-written F, B and W and their stashes."""

    def __init__(self, weights: list[tuple[torch.Tensor, torch.Tensor]]):
        self.weights = [(w.detach().clone(), b.detach().clone()) for w, b in weights]
        self.grads = [(torch.zeros_like(w), torch.zeros_like(b)) for w, b in self.weights]
        self.acts: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # mb -> (x, y)
        self.for_w: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # mb -> (x, g_z)

    def forward(self, mb: int, x: torch.Tensor) -> torch.Tensor:
        saved = []
        for w, b in self.weights:
            y = torch.tanh(torch.addmm(b, x, w.T))  # (mb, h)
            saved.append((x, y))
            x = y
        self.acts[mb] = saved
        return x

    def backward_input(self, mb: int, g: torch.Tensor) -> torch.Tensor:
        stash = []
        for (w, _), (x, y) in zip(reversed(self.weights), reversed(self.acts.pop(mb))):
            g_z = g * (1 - y * y)  # (mb, h)
            stash.append((x, g_z))
            g = g_z @ w  # (mb, h): gradient of the block's input
        self.for_w[mb] = stash[::-1]
        return g

    def backward_weight(self, mb: int) -> None:
        for (g_w, g_b), (x, g_z) in zip(self.grads, self.for_w.pop(mb)):
            g_w.addmm_(g_z.T, x)  # (h, h)
            g_b.add_(g_z.sum(0))


def links(stages: int, chunks: int, v_shape: bool = False) -> dict[tuple[int, str], object]:
    """One process group per link between virtual stages k and k+1 on two different stages and
    per direction ("fwd", "bwd"). Every rank must call this, in the same order (new_group is
    collective). In a V, virtual stages P-1 and P share a stage: no group, the tensor stays."""
    groups = {}
    for k in range(stages * chunks - 1):
        pair = sorted({stage_of(k, stages, v_shape), stage_of(k + 1, stages, v_shape)})
        if len(pair) == 1:
            continue
        for direction in ("fwd", "bwd"):
            groups[(k, direction)] = dist.new_group(pair)
    return groups


def run(
    schedule: list[Action],
    stage: int,
    stages: int,
    chunks: list[Chunk],
    inputs: list[torch.Tensor],
    targets: list[torch.Tensor],
    groups: dict,
    v_shape: bool = False,
) -> dict:
    """Run this stage's actions in order; return the loss (last stage only, else None) and the
    events: ``wall`` (every computation, send and receive, seconds from a common start after a
    barrier) and ``stage`` (the computations on the stage clock). An event is
    ``(start_s, end_s, kind, label)``, kind a value of
    :data:`helpers.parallel.pp_schedules.KIND_NAMES`, "send" or "recv".

    ``inputs``/``targets`` are the m micro-batches (only virtual stage 0 reads inputs, only the
    last one targets).
    """
    p, v, m = stages, len(chunks), len(inputs)
    last = p * v - 1
    dev = inputs[0].device
    on_gpu = dev.type == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    cost_clock = time.perf_counter if on_gpu else time.thread_time  # a stage's own work
    wall, stage_events, pending, grads_in, losses, local = [], [], [], {}, [], {}
    clock = 0.0  # the stage clock: this stage's work, and the clocks that messages carry

    def timed(kind: str, label: str, fn):
        nonlocal clock
        sync()
        start, c0 = time.perf_counter() - t0, cost_clock()
        out = fn()
        sync()
        wall.append((start, time.perf_counter() - t0, kind, label))
        if kind not in ("send", "recv"):
            cost = cost_clock() - c0
            stage_events.append((clock, clock + cost, kind, label))
            clock += cost
        return out

    def recv(like: torch.Tensor, k_link: int, direction: str, src_k: int, a: Action):
        nonlocal clock
        label = a.label()
        if (k_link, direction, a.mb) in local:  # from this stage's other chunk
            return local.pop((k_link, direction, a.mb))
        buf = torch.empty(like.numel() + 1, dtype=like.dtype, device=dev)
        g, src = groups[(k_link, direction)], stage_of(src_k, p, v_shape)
        timed("recv", label, lambda: dist.recv(buf, src=src, group=g))
        clock = max(clock, buf[-1].item())  # the input exists from the sender's clock on
        return buf[:-1].view_as(like)

    def send(t: torch.Tensor, k_link: int, direction: str, dst_k: int, a: Action):
        if stage_of(dst_k, p, v_shape) == stage:  # to this stage's other chunk: no message
            local[(k_link, direction, a.mb)] = t
            return
        label = a.label()
        stamp = torch.full((1,), clock, dtype=t.dtype, device=dev)
        msg = torch.cat([t.reshape(-1), stamp])  # the payload, then the sender's stage clock
        g, dst = groups[(k_link, direction)], stage_of(dst_k, p, v_shape)
        pending.append((timed("send", label, lambda: dist.isend(msg, dst=dst, group=g)), msg))

    dist.barrier()
    t0 = time.perf_counter()
    for a in schedule:
        k, chunk = virtual_stage(stage, a.chunk, p, v_shape), chunks[a.chunk]
        name = KIND_NAMES[a.kind]
        if a.kind == "F":
            x = inputs[a.mb] if k == 0 else recv(inputs[a.mb], k - 1, "fwd", k - 1, a)
            y = timed(name, a.label(), lambda: chunk.forward(a.mb, x))
            if k == last:
                diff = (
                    y - targets[a.mb]
                )  # loss: squared error summed per sample, mean over the batch
                losses.append((a.mb, (diff * diff).sum(-1).mean() / m))
                grads_in[(a.mb, a.chunk)] = 2 * diff / (len(diff) * m)  # d loss / d y
            else:
                send(y, k, "fwd", k + 1, a)
        elif a.kind in ("B", "BW"):
            g = grads_in.pop((a.mb, a.chunk), None)
            if g is None:
                g = recv(inputs[a.mb], k, "bwd", k + 1, a)

            def backward():
                g_x = chunk.backward_input(a.mb, g)
                if a.kind == "BW":
                    chunk.backward_weight(a.mb)
                return g_x

            g_x = timed(name, a.label(), backward)
            if k > 0:
                send(g_x, k - 1, "bwd", k - 1, a)
        else:
            timed(name, a.label(), lambda: chunk.backward_weight(a.mb))
    for work, _ in pending:
        work.wait()
    loss = sum(value for _, value in sorted(losses, key=lambda t: t[0])) if losses else None
    return {"loss": loss, "wall": wall, "stage": stage_events}
