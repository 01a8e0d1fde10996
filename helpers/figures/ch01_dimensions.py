"""Chapter 1's figures of the four dimensions one by one, computed from the book's own functions.

:func:`dp_figure` draws the gradients of an actual backward pass on each data shard beside their
mean and the full batch's (:func:`dp_gradients`); :func:`tp_figure` and :func:`sp_figure` who owns
what in a Megatron MLP and around Ulysses' all-to-all, by the slicing rules the demos apply;
:func:`pp_figure` the GPipe timetable (:func:`gpipe_grid`, the order of
:func:`helpers.parallel.pp.gpipe_order`) and its bubble; :func:`loss_curves_figure` the losses of
Colossal-AI's layouts against their single-device reference.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

from helpers.figures.style import DPI, RANK_COLOURS, rank_cmap
from helpers.parallel.pp import bubble_fraction


def dp_gradients(
    world: int = 2, batch: int = 8, features: int = 4, seed: int = 0
) -> dict[str, np.ndarray]:
    """Gradients of a linear least-squares model: per data shard, their mean, and the full batch."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(batch, features, generator=g), torch.randn(batch, 1, generator=g)
    w0 = torch.randn(features, 1, generator=g)

    def grad(rows: slice) -> np.ndarray:
        w = w0.clone().requires_grad_()
        ((x[rows] @ w - y[rows]) ** 2).mean().backward()
        return w.grad.flatten().numpy()

    per = batch // world
    shards = [grad(slice(r * per, (r + 1) * per)) for r in range(world)]
    return {
        **{f"rank {r}": s for r, s in enumerate(shards)},
        "all-reduce / P": np.mean(shards, axis=0),
        "full batch": grad(slice(None)),
    }


def dp_figure(world: int = 2):
    """Per-rank gradients differ; their average equals the full-batch gradient."""
    grads = dp_gradients(world)
    fig, ax = plt.subplots(figsize=(7, 2.8), dpi=DPI)
    width = 0.8 / len(grads)
    colours = RANK_COLOURS[:world] + ["#333333", "#BBBBBB"]
    for i, ((name, g), c) in enumerate(zip(grads.items(), colours)):
        ax.bar(
            np.arange(len(g)) + i * width,
            g,
            width,
            label=name.replace("/ P", "/ D"),  # the key stays; the data degree is D
            color=c,
            hatch="//" if name == "full batch" else None,
            edgecolor="white",
        )
    ax.set_xticks(np.arange(len(g)) + 0.4 - width / 2, [f"∂L/∂w{j}" for j in range(len(g))])
    ax.axhline(0, color="black", lw=0.5)
    ax.set_title(
        f"Data parallel, {world} shards: mean of shard gradients = full-batch gradient", fontsize=10
    )
    ax.legend(fontsize=8, ncol=len(grads), loc="lower center", bbox_to_anchor=(0.5, -0.45))
    fig.tight_layout()
    return fig


def tp_figure(hidden: int = 8, tp: int = 2):
    """Who owns which weights in a Megatron MLP: A (h×4h) by columns, B (4h×h) by rows."""
    ffn = 4 * hidden
    owner_a = np.repeat(np.arange(tp), ffn // tp)[None, :].repeat(
        hidden, 0
    )  # (h, 4h): column blocks
    owner_b = owner_a.T  # (4h, h): row blocks
    fig, axes = plt.subplots(
        1, 2, figsize=(7, 2.8), dpi=DPI, gridspec_kw={"width_ratios": [4, 1.4]}
    )
    for ax, owner, title in [
        (axes[0], owner_a, "A (h × 4h): split by columns\n→ GeLU(X·A_r) needs no communication"),
        (axes[1], owner_b, "B (4h × h): split by rows\n→ partial sums, one all-reduce"),
    ]:
        ax.imshow(owner, cmap=rank_cmap(tp), aspect="auto", vmin=0, vmax=tp - 1)
        ax.set_title(title, fontsize=9)
        ax.set_xticks([]), ax.set_yticks([])
    handles = [plt.Rectangle((0, 0), 1, 1, color=RANK_COLOURS[r]) for r in range(tp)]
    fig.legend(
        handles, [f"tp rank {r}" for r in range(tp)], loc="lower center", ncol=tp, fontsize=8
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def gpipe_grid(stages: int, microbatches: int) -> np.ndarray:
    """The GPipe timetable: cell (stage, slot) = +k+1 forward of micro-batch k, -(k+1) backward, 0
    idle."""
    p, m = stages, microbatches
    slots = 2 * (m + p - 1)
    grid = np.zeros((p, slots), dtype=int)
    for s in range(p):
        for k in range(m):
            grid[s, s + k] = k + 1  # forward of k reaches stage s at slot s + k
            grid[s, (m + p - 1) + (p - 1 - s) + k] = -(m - k)  # B(m-1) .. B0, last stage first
    return grid


def pp_figure(stages: int = 4, microbatches: int = 4):
    """GPipe schedule: forwards then backwards; grey cells are the bubble."""
    grid = gpipe_grid(stages, microbatches)
    fig, ax = plt.subplots(figsize=(7, 0.55 * stages + 1.1), dpi=DPI)
    for s in range(stages):
        for t, v in enumerate(grid[s]):
            colour = "#DDDDDD" if v == 0 else ("#4C72B0" if v > 0 else "#DD8452")
            ax.add_patch(
                plt.Rectangle((t, stages - 1 - s), 1, 1, facecolor=colour, edgecolor="white")
            )
            if v:
                ax.text(
                    t + 0.5,
                    stages - 0.5 - s,
                    f"{'F' if v > 0 else 'B'}{abs(v) - 1}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
    ax.set_xlim(0, grid.shape[1]), ax.set_ylim(0, stages)
    ax.set_yticks(np.arange(stages) + 0.5, [f"stage {s}" for s in reversed(range(stages))])
    ax.set_xlabel("time slot")
    bubble = bubble_fraction(stages, microbatches)
    ax.set_title(
        f"GPipe, P={stages} stages, m={microbatches} micro-batches: bubble (P−1)/(m+P−1) = "
        f"{bubble:.0%}"
    )
    fig.tight_layout()
    return fig


def sp_figure(seq: int = 8, heads: int = 4, sp: int = 2):
    """Ulysses all-to-all: tokens split across ranks before, heads split across ranks after."""
    before = np.repeat(np.arange(sp), seq // sp)[:, None].repeat(heads, 1)  # (s, a): rows by rank
    after = np.repeat(np.arange(sp), heads // sp)[None, :].repeat(seq, 0)  # (s, a): columns by rank
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.8), dpi=DPI)
    for ax, owner, title in [
        (axes[0], before, "before: (b, s/S, a, d)\neach rank: its tokens, all heads"),
        (axes[1], after, "after all-to-all: (b, s, a/S, d)\neach rank: all tokens, its heads"),
    ]:
        ax.imshow(owner, cmap=rank_cmap(sp), aspect="auto", vmin=0, vmax=sp - 1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("head"), ax.set_ylabel("token position")
        ax.set_xticks(range(heads)), ax.set_yticks(range(seq))
    handles = [plt.Rectangle((0, 0), 1, 1, color=RANK_COLOURS[r]) for r in range(sp)]
    fig.legend(
        handles, [f"sp rank {r}" for r in range(sp)], loc="lower center", ncol=sp, fontsize=8
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def loss_curves_figure(runs: list[dict], title: str):
    """Loss per step of each parallel layout against its single-device reference."""
    fig, ax = plt.subplots(figsize=(7, 3), dpi=DPI)
    ax.plot(runs[0]["reference"], color="black", lw=3, alpha=0.3, label="single-GPU reference")
    for r, c in zip(runs, RANK_COLOURS * 2):
        style = ":" if r.get("expect_drift") else "-"
        ax.plot(r["losses"], style, color=c, lw=1.2, label=r["name"])
    ax.set_xlabel("step"), ax.set_ylabel("loss")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig
