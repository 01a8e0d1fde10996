"""Ring all-reduce as a reduce-scatter followed by an all-gather: Chapter 1's concept figure.

:func:`ring_allreduce` runs the ring on N ranks and records every step. Each rank's buffer of M
bytes is cut into N chunks, and in every step each rank sends one chunk (M/N bytes) to its
right-hand neighbour:

* **reduce-scatter**, N - 1 steps: in step k rank r sends chunk (r - k) mod N and the receiver
  adds it to its own copy. Afterwards rank r holds the complete sum of chunk (r + 1) mod N;
* **all-gather**, N - 1 steps: in step k rank r sends chunk (r + 1 - k) mod N and the receiver
  keeps it. Afterwards every rank holds every summed chunk.

The run tracks, for every (rank, chunk), which ranks' contributions it holds, and it adds real
numbers alongside, so the result can be checked against the plain sum. Each rank sends
2(N - 1) chunks of M/N bytes: 2(N - 1)/N · M, the all-reduce's factor in
:func:`helpers.cost.comm.bytes_sent`. :func:`ring_figure` draws the states step by step.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from helpers.figures.style import DPI


def ring_allreduce(n: int, seed: int = 0) -> dict:
    """Run a ring all-reduce on ``n`` ranks. Returns ``steps`` (phase, step, the ranks' holdings
    as frozensets of contributors, the (sender, receiver, chunk) of each message), ``sent``
    (chunks each rank sent), ``values`` (each rank's final buffer) and ``expected`` (the sum)."""
    if n < 2:
        raise ValueError(f"a ring needs at least 2 ranks, got {n}")
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((n, n))  # data[r, c]: rank r's chunk c (one number per chunk)
    held = [[frozenset({r}) for _ in range(n)] for r in range(n)]
    values = data.copy()
    sent = [0] * n
    steps = [{"phase": "start", "step": 0, "held": [row[:] for row in held], "messages": []}]
    for phase in ("reduce-scatter", "all-gather"):
        for k in range(n - 1):
            shift = -k if phase == "reduce-scatter" else 1 - k
            messages = [(r, (r + 1) % n, (r + shift) % n) for r in range(n)]
            payload = [(held[s][c], values[s, c]) for s, _, c in messages]  # sent at once
            for (s, d, c), (who, value) in zip(messages, payload):
                sent[s] += 1
                if phase == "reduce-scatter":
                    held[d][c], values[d, c] = held[d][c] | who, values[d, c] + value
                else:
                    held[d][c], values[d, c] = who, value
            steps.append(
                {
                    "phase": phase,
                    "step": k + 1,
                    "held": [row[:] for row in held],
                    "messages": messages,
                }
            )
    return {"n": n, "steps": steps, "sent": sent, "values": values, "expected": data.sum(axis=0)}


def _panel(ax, n: int, state: dict) -> None:
    """One step: rows are ranks, columns chunks; a cell lists the ranks whose contributions it
    sums (all of them: "all"), and its shade is how many."""
    cmap = plt.get_cmap("Blues")
    received = {(d, c) for _, d, c in state["messages"]}
    for r in range(n):
        for c in range(n):
            who = state["held"][r][c]
            shade = cmap(0.15 + 0.75 * (len(who) - 1) / max(n - 1, 1))
            edge, width = ("#DD8452", 2.5) if (r, c) in received else ("white", 1.0)
            ax.add_patch(
                plt.Rectangle((c, n - 1 - r), 1, 1, facecolor=shade, edgecolor=edge, lw=width)
            )
            ink = "white" if len(who) > n / 2 else "black"
            label = "all" if len(who) == n else "".join(map(str, sorted(who)))
            ax.text(c + 0.5, n - 0.5 - r, label, ha="center", va="center", fontsize=8, color=ink)
    ax.set_xlim(0, n), ax.set_ylim(0, n)
    ax.set_xticks(np.arange(n) + 0.5, [f"c{c}" for c in range(n)], fontsize=7)
    ax.set_yticks(np.arange(n) + 0.5, [f"rank {r}" for r in reversed(range(n))], fontsize=7)
    ax.tick_params(length=0)
    ax.set_aspect("equal")
    title = "start" if state["phase"] == "start" else f"{state['phase']} {state['step']}"
    ax.set_title(title, fontsize=9)


def ring_figure(n: int = 4):
    """The states of a ring all-reduce on ``n`` ranks: the start and the reduce-scatter steps on
    the top row, the all-gather steps below, and the byte count in the free corner."""
    run = ring_allreduce(n)
    cols = n
    fig, axes = plt.subplots(2, cols, figsize=(2.2 * cols, 5.0), dpi=DPI)
    states = run["steps"]
    top = [states[0]] + [s for s in states if s["phase"] == "reduce-scatter"]
    bottom = [s for s in states if s["phase"] == "all-gather"]
    for ax, state in zip(axes[0], top):
        _panel(ax, n, state)
    for ax, state in zip(axes[1][1:], bottom):
        _panel(ax, n, state)
    corner = axes[1][0]
    corner.axis("off")
    steps = 2 * (n - 1)
    corner.text(
        0.0,
        0.5,
        f"N = {n} ranks, M bytes each,\nin N chunks c0..c{n - 1}\n\n"
        f"each step, every rank\nsends one chunk (M/N)\nto the next rank\n\n"
        f"{n - 1} + {n - 1} = {steps} steps:\n"
        f"2(N−1)/N · M = {steps / n:g} M\nsent per rank",
        fontsize=8,
        va="center",
        transform=corner.transAxes,
    )
    fig.suptitle(
        "Ring all-reduce = reduce-scatter (top) + all-gather (bottom). A cell lists the ranks it "
        "sums;\noutlined: the chunk each rank just received",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig
