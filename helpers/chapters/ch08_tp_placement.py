"""Chapter 8, "Keep tensor parallelism inside a node": a tensor-parallel group inside a node and
spread over nodes, its communication against its compute.

Used by ``notebooks/08_troubleshooting.ipynb`` and Chapter 10's pitfall
(:func:`helpers.chapters.ch10_costs.tp_across_nodes`). The links are
:meth:`helpers.cost.step_time.Hardware.link` (a ring leaves a node once, through as many of its
cards as the group has members there: :func:`helpers.cost.placement.spanning_link`).
"""

from __future__ import annotations

from helpers.cost.comm import ops_time, tp_layer_ops
from helpers.cost.step_time import Hardware


def _default_per_node(tp: int, gpus_per_node: int) -> tuple[int, ...]:
    """The group packed into as few nodes as it fits, split over twice as many, and one GPU per
    node: (8, 4, 1) for T = 8 on nodes of 8 GPUs, (2, 1) for T = 2."""
    packed = max(k for k in range(1, min(tp, gpus_per_node) + 1) if tp % k == 0)
    half = packed // 2 if packed % 2 == 0 else packed
    return tuple(sorted({packed, half, 1}, reverse=True))


def tp_placements(
    params: float = 70e9,
    layers: int = 80,
    hidden: int = 8192,
    micro_batch: int = 1,
    seq: int = 4096,
    tp: int = 8,
    mfu: float = 0.4,
    per_node: tuple[int, ...] | None = None,
    hw: Hardware | None = None,
) -> list[dict]:
    """Per-step tensor-parallel communication against compute on one GPU, for placements of the
    TP group with ``per_node`` of its members on each node (default :func:`_default_per_node`:
    one node, twice as many nodes, one GPU per node), no overlap.

    * Communication: Megatron's 2 all-reduces of b·s·h in each layer's forward and 2 in its
      backward (Shoeybi et al. 2019, §3, Fig. 4; :func:`helpers.cost.comm.tp_layer_ops`). Each
      sits between two matmuls of the layer and the next one needs its result, so none of it
      overlaps compute, and each pays the link's latency α once (the α-β model of
      :func:`helpers.cost.comm.collective_time`).
    * Links: :meth:`helpers.cost.step_time.Hardware.link`. Inside one node NVLink; spanning nodes,
      a ring crosses the network once per node per channel and NCCL spreads the channels over the
      node's cards (nccl-tests ``doc/PERFORMANCE.md``; one card per GPU on HGX/DGX H100/H200
      nodes), so a group with k members on each node runs through k cards
      (:func:`helpers.cost.placement.spanning_link`): every GPU of the node is in such a group
      and the groups run at once. One member per node: one card, the figure a model that charges
      every
      rank one card gives for any placement.
    * Compute: 6·Ψ/t FLOPs per token (each TP rank holds 1/t of the matrices) at ``mfu`` of the
      bf16 peak.

    Each entry: ``nodes``, ``per_node``, ``cards`` (0 inside a node), the :class:`Link`,
    ``collectives`` per micro-batch, ``comm_s`` = ``latency_s`` (α × collectives) +
    ``bandwidth_s``, ``compute_s`` and ``share`` = comm / (comm + compute).
    """
    hw = hw or Hardware()
    gpn = hw.gpus_per_node
    tokens = micro_batch * seq
    compute = 6 * params / tp * tokens / (mfu * hw.peak_flops)
    ops = tp_layer_ops(micro_batch, seq, hidden) * layers
    out = []
    for k in per_node or _default_per_node(tp, gpn):
        if tp % k or k > gpn:
            raise ValueError(f"{k} members per node: not a divisor of T={tp} within {gpn} GPUs")
        link = hw.link("all_reduce", tp, k)
        comm = ops_time(ops, tp, link)
        latency = len(ops) * link.latency_s if tp > 1 else 0.0
        out.append(
            {
                "nodes": tp // k,
                "per_node": k,
                "cards": 0 if k == tp else (hw.cards_per_node or gpn) * k / gpn,
                "link": link,
                "collectives": len(ops),
                "comm_s": comm,
                "latency_s": latency,
                "bandwidth_s": comm - latency,
                "compute_s": compute,
                "share": comm / (comm + compute),
            }
        )
    return out


def placement_name(p: dict) -> str:
    """A placement's name: ``1 node × 8 GPUs (NVLink)``, ``2 nodes × 4 GPUs (4 cards)``,
    ``8 nodes × 1 GPU (1 card)``."""
    nodes = f"{p['nodes']} node{'s' if p['nodes'] > 1 else ''}"
    gpus = f"{p['per_node']} GPU{'s' if p['per_node'] > 1 else ''}"
    cards = p["cards"]
    via = "NVLink" if not cards else f"{cards:g} card{'s' if cards != 1 else ''}"
    return f"{nodes} × {gpus} ({via})"


def tp_placement_rows(**kwargs) -> list[dict]:
    """:func:`tp_placements` as table rows (keyword arguments passed on)."""
    return [
        {
            "TP group": placement_name(p),
            "link GB/s": round(p["link"].bandwidth_bytes_per_s / 1e9),
            "TP comm ms": round(p["comm_s"] * 1e3, 1),
            "of it latency ms": round(p["latency_s"] * 1e3, 1),
            "compute ms": round(p["compute_s"] * 1e3, 1),
            "comm share": f"{p['share']:.0%}",
        }
        for p in tp_placements(**kwargs)
    ]


TP_PLACEMENT_COLUMNS = [
    "TP group",
    "link GB/s",
    "TP comm ms",
    "of it latency ms",
    "compute ms",
    "comm share",
]


def tp_placement_numbers() -> dict[str, int | float]:
    """The numbers Chapter 8's page quotes about TP placement, under their glue keys: per
    placement ``ch08-tp-<nodes>x<per node>-{ms,share,gbs,latency-ms}`` for T = 8 (and the
    same for T = 2 with ``ch08-tp2-``), the compute, the all-reduces per micro-batch and the
    links' assumed latencies."""
    out: dict[str, int | float] = {}
    for prefix, tp in (("ch08-tp", 8), ("ch08-tp2", 2)):
        for p in tp_placements(tp=tp):
            key = f"{prefix}-{p['nodes']}x{p['per_node']}"
            out[f"{key}-ms"] = round(p["comm_s"] * 1e3)
            out[f"{key}-share"] = round(100 * p["share"])
            out[f"{key}-gbs"] = round(p["link"].bandwidth_bytes_per_s / 1e9)
            out[f"{key}-latency-ms"] = round(p["latency_s"] * 1e3, 1)
        out[f"{prefix}-compute-ms"] = round(p["compute_s"] * 1e3)
        out[f"{prefix}-collectives"] = p["collectives"]
    hw = Hardware()
    out["ch08-tp-alpha-nvlink-us"] = round(hw.intra.latency_s * 1e6)
    out["ch08-tp-alpha-ib-us"] = round(hw.inter.latency_s * 1e6)
    return out
