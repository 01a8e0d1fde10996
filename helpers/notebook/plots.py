"""Figures computed from the book's own functions (Chapter 1 so far).

Every figure is drawn from code the demos use: the pipeline schedule from
:func:`helpers.parallel.pp.gpipe_order`, the ownership maps from the same slicing rules the demos
apply, the data-parallel gradients from an actual backward pass. :func:`show` displays a figure
in the notebook and glues it under a key, so the chapter page can paste the same image.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import ListedColormap

from helpers.parallel.pp import bubble_fraction

RANK_COLOURS = [
    "#4C72B0",
    "#DD8452",
    "#55A868",
    "#C44E52",
    "#8172B3",
    "#937860",
    "#DA8BC3",
    "#8C8C8C",
]
DPI = 80


def show(fig, key: str) -> None:
    """Display ``fig`` in the notebook, glue it as ``key`` for the book page, and close it.

    Without myst-nb (a GPU box that has only the notebook tools) the figure is just displayed.
    """
    try:
        from myst_nb import glue
    except ImportError:
        from IPython.display import display

        display(fig)
    else:
        glue(key, fig, display=True)
    plt.close(fig)


def _rank_cmap(n: int) -> ListedColormap:
    return ListedColormap(RANK_COLOURS[:n])


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
            label=name,
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
        ax.imshow(owner, cmap=_rank_cmap(tp), aspect="auto", vmin=0, vmax=tp - 1)
        ax.set_title(title, fontsize=9)
        ax.set_xticks([]), ax.set_yticks([])
    handles = [plt.Rectangle((0, 0), 1, 1, color=RANK_COLOURS[r]) for r in range(tp)]
    fig.legend(
        handles, [f"tp rank {r}" for r in range(tp)], loc="lower center", ncol=tp, fontsize=8
    )
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def gpipe_grid(stages: int, microbatches: int) -> np.ndarray:
    """The GPipe timetable: cell (stage, slot) = +k+1 forward of micro-batch k, -(k+1) backward, 0 idle."""
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
        f"GPipe, p={stages} stages, m={microbatches} micro-batches: bubble (p−1)/(m+p−1) = {bubble:.0%}"
    )
    fig.tight_layout()
    return fig


def sp_figure(seq: int = 8, heads: int = 4, sp: int = 2):
    """Ulysses all-to-all: tokens split across ranks before, heads split across ranks after."""
    before = np.repeat(np.arange(sp), seq // sp)[:, None].repeat(heads, 1)  # (s, a): rows by rank
    after = np.repeat(np.arange(sp), heads // sp)[None, :].repeat(seq, 0)  # (s, a): columns by rank
    fig, axes = plt.subplots(1, 2, figsize=(7, 2.8), dpi=DPI)
    for ax, owner, title in [
        (axes[0], before, "before: (b, s/P, a, d)\neach rank: its tokens, all heads"),
        (axes[1], after, "after all-to-all: (b, s, a/P, d)\neach rank: all tokens, its heads"),
    ]:
        ax.imshow(owner, cmap=_rank_cmap(sp), aspect="auto", vmin=0, vmax=sp - 1)
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


# --- Chapter 2: the rank mesh -------------------------------------------------------------------


def mesh_figure(
    mesh, names: dict[str, str] | None = None, labels: bool | None = None, title: str | None = None
):
    """Every rank of a ``dp × pp × tp`` RankMesh, its (dp, pp, tp) coordinate and its three groups.

    One panel per dp index; inside it, rows are pipeline stages (stage 0 on top) and columns tensor
    ranks. A dark box around a row is a TP group, a grey bar through a column a PP group, and cells
    of the same colour in different panels form a DP group. ``names`` relabels the axes (the
    builder analogy: {"dp": "crew", "pp": "section", "tp": "trade"}); ``labels`` writes each
    group's members next to it (default: only for meshes of at most 8 ranks).
    """
    from matplotlib.colors import to_rgb
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyBboxPatch, Patch, Rectangle

    if mesh.sp != 1:
        raise ValueError(f"mesh_figure draws dp × pp × tp meshes; this one has sp={mesh.sp}")
    names = {"dp": "dp", "pp": "pp", "tp": "tp", **(names or {})}
    labels = mesh.world_size <= 8 if labels is None else labels
    D, P, T = mesh.dp, mesh.pp, mesh.tp
    small = mesh.world_size <= 8
    fig, axes = plt.subplots(
        1, D, figsize=(3.5 * D if small else 3.2 * D, 0.75 * P + 1.6), dpi=DPI, squeeze=False
    )
    # one colour per DP group (cell position), all distinct
    colours = (
        RANK_COLOURS[: P * T]
        if P * T <= len(RANK_COLOURS)
        else [plt.get_cmap("tab20")(i % 20) for i in range(P * T)]
    )
    for d, ax in enumerate(axes[0]):
        for p in range(P):
            y = P - 1 - p
            ax.add_patch(
                FancyBboxPatch(
                    (-0.45, y - 0.42),
                    T - 0.1,
                    0.84,
                    boxstyle="round,pad=0.02",
                    fill=False,
                    edgecolor="#222222",
                    lw=1.6,
                    zorder=3,
                )
            )
            if labels:
                ax.text(
                    T - 0.4,
                    y,
                    f"TP {mesh.group_of(mesh.rank_of(d, p, 0), 'tp')}",
                    va="center",
                    fontsize=7,
                )
            for t in range(T):
                r, colour = mesh.rank_of(d, p, t), colours[p * T + t]
                ink = "black" if np.dot(to_rgb(colour), (0.299, 0.587, 0.114)) > 0.6 else "white"
                ax.add_patch(Rectangle((t - 0.35, y - 0.35), 0.7, 0.7, color=colour, zorder=2))
                ax.text(
                    t,
                    y + 0.08,
                    f"rank {r}" if small else str(r),
                    ha="center",
                    va="center",
                    fontsize=9 if small else 8,
                    color=ink,
                    weight="bold",
                    zorder=4,
                )
                if small:
                    ax.text(
                        t,
                        y - 0.18,
                        f"({d},{p},{t})",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color=ink,
                        zorder=4,
                    )
        for t in range(T):
            ax.plot(
                [t, t],
                [-0.45, P - 0.55],
                color="#999999",
                lw=10 if small else 6,
                alpha=0.5,
                solid_capstyle="round",
                zorder=1,
            )
            if labels:
                ax.text(
                    t,
                    -0.62,
                    f"PP {mesh.group_of(mesh.rank_of(d, 0, t), 'pp')}",
                    ha="center",
                    va="top",
                    fontsize=7,
                )
        (
            ax.set_xlim(-0.6, T + (0.9 if labels else -0.4)),
            ax.set_ylim(-0.9 if labels else -0.6, P - 0.4),
        )
        ax.set_xticks(range(T), [f"{names['tp']} {t}" for t in range(T)], fontsize=8)
        ax.set_yticks(range(P), [f"{names['pp']} {P - 1 - y}" for y in range(P)], fontsize=8)
        ax.xaxis.tick_top()
        ax.tick_params(length=0)
        for spine in ax.spines.values():
            spine.set_visible(False)
        ax.set_title(f"{names['dp']} {d}", fontsize=10, pad=18)
    handles = [
        Patch(fill=False, edgecolor="#222222", lw=1.6, label="TP group: one row"),
        Line2D([], [], color="#999999", lw=6, alpha=0.5, label="PP group: one column"),
        Patch(color=colours[0], label="DP group: one colour across panels"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=7, frameon=False)
    fig.suptitle(
        title or f"{mesh.world_size} ranks as D={D} × P={P} × T={T}, coordinate (dp, pp, tp)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def resume_figure(
    uninterrupted: list[float],
    before_kill: dict[int, float],
    resumed: list[float],
    resume_step: int,
    kill_step: int,
):
    """Chapter 5: the loss of an uninterrupted run, of a run killed at ``kill_step`` (what it logged)
    and of its resumption from the checkpoint of ``resume_step``; steps count from 1."""
    steps = np.arange(1, len(uninterrupted) + 1)
    fig, ax = plt.subplots(figsize=(7, 3), dpi=DPI)
    ax.plot(steps, uninterrupted, color="black", lw=4, alpha=0.25, label="uninterrupted run")
    killed = sorted(before_kill)
    ax.plot(
        killed,
        [before_kill[s] for s in killed],
        "o-",
        color=RANK_COLOURS[0],
        ms=4,
        lw=1.2,
        label=f"run killed at step {kill_step}",
    )
    again = steps[resume_step:]
    ax.plot(
        again,
        resumed[resume_step:],
        "s--",
        color=RANK_COLOURS[1],
        ms=4,
        lw=1.2,
        label=f"resumed from step_{resume_step:08d}",
    )
    ax.axvline(kill_step, color=RANK_COLOURS[3], lw=1, ls=":")
    ax.text(
        kill_step - 0.05,
        0.04,
        "SIGKILL",
        transform=ax.get_xaxis_transform(),
        color=RANK_COLOURS[3],
        fontsize=8,
        ha="right",
    )
    ax.axvline(resume_step + 0.5, color="grey", lw=1, ls=":")
    ax.text(
        resume_step + 0.45,
        0.04,
        "last checkpoint",
        transform=ax.get_xaxis_transform(),
        color="grey",
        fontsize=8,
        ha="right",
    )
    ax.set_xticks(steps)
    ax.set_xlabel("step"), ax.set_ylabel("loss (mean over ranks)")
    ax.set_title(
        "Killed, resumed from the last checkpoint: the same losses bit for bit", fontsize=10
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def gpu_resume_figure(record: dict):
    """Chapter 5 on GPUs (:mod:`helpers.record.ch05`): left, each layout's uninterrupted run and
    its resume after a kill; right, a tensor-parallel checkpoint resumed under data parallelism."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3), dpi=DPI, sharey=False)
    for kr, c in zip(record["kill_and_resume"], RANK_COLOURS):
        full, _, resumed = kr["runs"]
        if full.get("losses"):
            steps = np.arange(1, len(full["losses"]) + 1)
            left.plot(
                steps,
                full["losses"],
                color=c,
                lw=4,
                alpha=0.3,
                label=f"{kr['layout']} uninterrupted",
            )
        if resumed.get("losses"):
            steps = np.arange(1, len(resumed["losses"]) + 1)
            left.plot(
                steps[3:],
                resumed["losses"][3:],
                "s--",
                color=c,
                ms=3,
                lw=1,
                label=f"{kr['layout']} resumed",
            )
    left.set_title("killed at step 5, resumed from step 3", fontsize=9)
    names = {
        0: "source, uninterrupted",
        1: "target from scratch",
        2: "target resumed from the source's step 3",
    }
    rs = record["reshard"]
    for i, run in enumerate(rs["runs"]):
        if run.get("losses"):
            steps = np.arange(1, len(run["losses"]) + 1)
            style = (
                dict(lw=4, alpha=0.3)
                if i == 0
                else dict(ls="--" if i == 2 else ":", marker="s" if i == 2 else None, ms=3, lw=1.2)
            )
            shown = slice(3, None) if i == 2 else slice(None)
            right.plot(
                steps[shown],
                run["losses"][shown],
                color=RANK_COLOURS[i],
                label=f"{run['name']} ({names[i]})",
                **style,
            )
    right.set_title(f"saved as {rs['source']}, resumed as {rs['target']}", fontsize=9)
    for ax in (left, right):
        ax.set_xlabel("step"), ax.set_ylabel("loss")
        ax.legend(fontsize=6)
    fig.tight_layout()
    return fig
