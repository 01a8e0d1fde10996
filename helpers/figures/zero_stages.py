"""What each ZeRO stage, FSDP2 and Megatron's distributed optimizer keep on each rank (Chapter 7).

:func:`kept_per_rank` asks the book's memory model for the bytes per parameter of the three
model states (parameters, gradients, optimizer states) under each scheme, over D data-parallel
ranks, with mixed-precision Adam: ZeRO stages 0-3 from :func:`helpers.cost.memory.model_states`
(the ZeRO paper's accounting), FSDP2 and Megatron-LM's distributed optimizer from
:func:`helpers.cost.memory_plan.fsdp_states` and :func:`helpers.cost.memory_plan.megatron_states`.
A state is *sharded* when a rank keeps 1/D of it. :func:`zero_stages_figure` draws one row per
scheme and one box per rank: a filled bar is a state the rank holds whole, a filled slice of an
outlined bar the rank's own shard of a sharded state.
"""

from __future__ import annotations

from helpers.cost.memory import model_states
from helpers.cost.memory_llama import rank_params
from helpers.cost.memory_plan import PlanLayout, fsdp_states, megatron_states

STATES = ("parameters", "gradients", "optimizer states")
COLOURS = {"parameters": "#4C72B0", "gradients": "#DD8452", "optimizer states": "#55A868"}
ZERO_NAMES = ("ZeRO-0 (plain DDP)", "ZeRO-1", "ZeRO-2", "ZeRO-3")
FSDP = "FSDP2 (fully_shard)"
MEGATRON = "Megatron distributed optimizer"


def _states(kept: dict, full: dict) -> dict:
    """{state: (bytes per parameter this rank keeps, bytes unsharded, sharded?)}."""
    return {s: (kept[s], full[s], abs(kept[s] - full[s]) > 1e-9) for s in STATES}


def kept_per_rank(d: int = 4, precision: str = "bf16") -> dict[str, dict]:
    """Per scheme, per state: (bytes per parameter one rank keeps, unsharded bytes, sharded?),
    over ``d`` data-parallel ranks; FSDP2 also ``gathered``, the bytes per parameter of the 16-bit
    layers it gathers for a moment (two layers of the chapter's model, over all its parameters)."""
    out = {}
    full = dict(zip(STATES, model_states(1, precision, 0, dp=1)))
    for stage, name in enumerate(ZERO_NAMES):
        out[name] = _states(dict(zip(STATES, model_states(1, precision, stage, dp=d))), full)

    def per_param(states_of, dp: int) -> dict:
        layout = PlanLayout(name=name, plugin="hybrid", precision=precision, world=dp)
        raw = {k: v / rank_params(layout) for k, v in states_of(layout).items()}
        return raw

    name = FSDP
    f, f1 = per_param(fsdp_states, d), per_param(fsdp_states, 1)
    out[FSDP] = _states(
        {"parameters": f["master"], "gradients": f["grads"], "optimizer states": f["optimizer"]},
        {"parameters": f1["master"], "gradients": f1["grads"], "optimizer states": f1["optimizer"]},
    )
    out[FSDP]["gathered"] = f["weights"]
    name = MEGATRON
    m, m1 = per_param(megatron_states, d), per_param(megatron_states, 1)

    def megatron(x: dict) -> dict:
        return {
            "parameters": x["weights"],
            "gradients": x["buckets"],
            "optimizer states": x["master"] + x["optimizer"],
        }

    out[MEGATRON] = _states(megatron(m), megatron(m1))
    return out


def kept_rows(d: int = 4, precision: str = "bf16") -> list[dict]:
    """:func:`kept_per_rank` as a table: bytes per parameter each rank keeps, per state."""
    rows = []
    for scheme, states in kept_per_rank(d, precision).items():
        row = {"scheme": scheme}
        for s in STATES:
            kept, full, sharded = states[s]
            row[f"{s} B"] = f"{kept:.3g}" + (f" (1/{d} of {full:.3g})" if sharded else "")
        row["per rank B"] = f"{sum(states[s][0] for s in STATES):.3g}"
        rows.append(row)
    return rows


def zero_stages_figure(d: int = 4, precision: str = "bf16"):
    """One row per scheme, one box per rank; bar lengths are bytes per parameter."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    schemes = kept_per_rank(d, precision)
    width = max(sum(v[s][1] for s in STATES) for v in schemes.values())
    gap, height = 0.12 * width, 0.55
    fig, ax = plt.subplots(figsize=(11, 0.62 * len(schemes) + 1.2), dpi=80)
    for row, (scheme, states) in enumerate(schemes.items()):
        y = len(schemes) - 1 - row
        for rank in range(d):
            x = rank * (width + gap)
            for s in STATES:
                kept, full, sharded = states[s]
                ax.add_patch(
                    Rectangle((x, y - height / 2), full, height, fill=False, ec=COLOURS[s], lw=1)
                )
                left = x + (rank * full / d if sharded else 0)
                ax.add_patch(
                    Rectangle((left, y - height / 2), kept, height, color=COLOURS[s], lw=0)
                )
                x += full
            if "gathered" in states:
                ax.add_patch(
                    Rectangle(
                        (x, y - height / 2),
                        states["gathered"],
                        height,
                        fill=False,
                        hatch="////",
                        ec=COLOURS["parameters"],
                        lw=0.5,
                    )
                )
        total = sum(states[s][0] for s in STATES)
        ax.text(-0.03 * width, y, scheme, ha="right", va="center", fontsize=9)
        ax.text(d * (width + gap) - gap / 2, y, f"{total:.3g} B", va="center", fontsize=9)
    for rank in range(d):
        ax.text(rank * (width + gap) + width / 2, len(schemes) - 0.4, f"rank {rank}", ha="center")
    handles = [Rectangle((0, 0), 1, 1, color=COLOURS[s]) for s in STATES]
    handles.append(Rectangle((0, 0), 1, 1, fill=False, ec="grey"))
    handles.append(Rectangle((0, 0), 1, 1, fill=False, ec=COLOURS["parameters"], hatch="////"))
    labels = [*STATES, "held by the other ranks", "16-bit layers gathered for a moment"]
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=5, fontsize=8)
    ax.set_xlim(-0.02 * width, d * (width + gap) + 0.6 * gap)
    ax.set_ylim(-0.6, len(schemes) - 0.1)
    ax.axis("off")
    ax.set_title(
        f"Bytes per parameter each of D = {d} ranks keeps ({precision} Adam); "
        "right: the rank's total",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
