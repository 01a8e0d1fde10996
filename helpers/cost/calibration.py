"""Chapter 3's collectives against the α-β model: calibrated once, checked on what it did not see.

:func:`calibrate` fits α and β (:func:`helpers.cost.comm.fit_link`, relative errors) to the
all-reduce times of a ch03_collectives record at every other size from 1 MB up; every other
(collective, size) is *predicted* by :func:`helpers.cost.comm.collective_time` with that one link,
the bytes each collective sends per rank (ring volumes) and nothing else. :func:`collective_table`
puts prediction and measurement side by side, :func:`helpers.figures.ch03_comm.busbw_figure`
draws them (Chapter 3, "Step 2: the hardware", "Calibrated on NCCL"); Chapter 5's mesh orders
fit the same model to their own link (:mod:`helpers.cluster.mesh_orders`).
"""

from __future__ import annotations

from helpers.cost.comm import ALIASES, Link, collective_time, fit_link, ring_steps

MB = 2**20


def measured_collectives(record_runs: list[dict]) -> list[dict]:
    """The benchmark rows (collective, size_bytes, seconds, busbw) of a ch03_collectives record."""
    rows = []
    for run in record_runs:
        for r in run.get("results", []):
            rows.append({**r, "collective": ALIASES.get(r["collective"], r["collective"])})
    return rows


MODELS = ("host_floor", "alpha_beta", "ring_steps")


def host_floors(rows: list[dict], below: int = MB) -> dict[str, float]:
    """Per collective, the fastest call among messages smaller than ``below``: the fixed cost of one
    call (issuing it on the host through torch.distributed and NCCL, starting its kernel), which
    back-to-back calls cannot beat. The benchmark does not separate the host and GPU parts."""
    floors: dict[str, float] = {}
    for r in rows:
        if r["size_bytes"] < below:
            floors[r["collective"]] = min(floors.get(r["collective"], float("inf")), r["seconds"])
    return floors


def calibrate(
    rows: list[dict], model: str = "host_floor", min_bytes: int = MB
) -> tuple[Link, list[int], dict]:
    """Fit one link (α, β) to all-reduce times at every other size; return it, the sizes used and
    the floors.

    ``alpha_beta``: sizes >= ``min_bytes``, t = α + bytes/β. ``ring_steps``: the same fit, α then
    charged per ring step (2(n-1) for all-reduce, n-1 for the others; Thakur et al. 2005).
    ``host_floor``: t = max(floor of the collective, α + bytes/β), the link fitted only where the
    all-reduce is bound by the GPU (time > 2 × its floor), the floors from messages < ``min_bytes``.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, not {model!r}")
    n = rows[0]["n"]
    floors = host_floors(rows, min_bytes) if model == "host_floor" else {}
    allreduce = sorted(
        (r["size_bytes"], r["seconds"]) for r in rows if r["collective"] == "all_reduce"
    )
    if model == "host_floor":
        candidates = [
            s for s, t in allreduce if s >= min_bytes and t > 2 * floors.get("all_reduce", 0.0)
        ]
    else:
        candidates = [s for s, _ in allreduce if s >= min_bytes]
    used = candidates[::2] if len(candidates) >= 4 else candidates
    link = fit_link(
        [(s, t) for s, t in allreduce if s in used],
        "fitted to all-reduce",
        collective="all_reduce",
        n=n,
        relative=True,
    )
    if model == "ring_steps":
        link = Link(
            "fitted to all-reduce, latency per ring step",
            link.bandwidth_bytes_per_s,
            link.latency_s / ring_steps("all_reduce", n),
        )
    return link, used, floors


def predict(
    collective: str,
    size_bytes: int,
    n: int,
    link: Link,
    model: str = "host_floor",
    floors: dict | None = None,
) -> float:
    """Seconds per call under ``model`` (see :func:`calibrate`)."""
    # [start: host-floor]
    t = collective_time(collective, size_bytes, n, link, per_step=model == "ring_steps")
    return max(t, (floors or {}).get(collective, 0.0)) if model == "host_floor" else t
    # [end: host-floor]


def collective_table(
    rows: list[dict], model: str = "host_floor", min_bytes: int = MB
) -> tuple[list[dict], Link]:
    """Predicted vs measured time for every (collective, size) with its error and its role: ``fit``
    (the all-reduce points the link was fitted to), ``floor`` (small messages that set the host
    floors, host_floor model only) or ``held out`` (a prediction)."""
    link, used, floors = calibrate(rows, model, min_bytes)
    table = []
    for r in sorted(rows, key=lambda r: (r["collective"], r["size_bytes"])):
        predicted = predict(r["collective"], r["size_bytes"], r["n"], link, model, floors)
        role = (
            "fit"
            if r["collective"] == "all_reduce" and r["size_bytes"] in used
            else "floor"
            if floors and r["size_bytes"] < min_bytes
            else "held out"
        )
        table.append(
            {
                "collective": r["collective"],
                "size": _size(r["size_bytes"]),
                "size_bytes": r["size_bytes"],
                "measured us": round(r["seconds"] * 1e6, 1),
                "predicted us": round(predicted * 1e6, 1),
                "error %": round(100 * (predicted - r["seconds"]) / r["seconds"], 1),
                "busbw GB/s": round(r["busbw"] / 1e9, 1),
                "role": role,
            }
        )
    return table, link


def _size(b: int) -> str:
    for unit, div in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if b >= div and b % div == 0:
            return f"{b // div}{unit}"
    return str(b)


def worst_error(table: list[dict], min_bytes: int = MB) -> dict:
    """The held-out row with the largest |error| among messages of at least ``min_bytes``."""
    return max(
        (r for r in table if r["size_bytes"] >= min_bytes and r["role"] == "held out"),
        key=lambda r: abs(r["error %"]),
    )
