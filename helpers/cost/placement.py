"""Where a group's ranks sit and which link it sees: the placement half of the cost model.

Used by :mod:`helpers.cost.step_time` (``Hardware.link``) and Chapter 5's node-egress measurement.

(NCCL's rings and trees, NVIDIA's "Doubling all2all performance with
  NCCL 2.12" and nccl-tests ``doc/PERFORMANCE.md``; the node layout of HGX/DGX A100, H100 and H200:
  one network card per GPU): a ring that spans nodes crosses the network once per node per
  channel, and NCCL spreads its channels over the node's cards. The bytes that leave a node are
  then one rank's 2(N-1)/N·S for an all-reduce, not one rank's times the ranks on the node, and
  they leave through all the node's cards at once. :func:`spanning_link` turns one card into the
  link such a group sees. All-to-all cannot use that: every rank sends its own share to every
  other rank, so each rank's cross-node bytes go through the one card nearest to it.

Ranks are laid out as Colossal-AI's ``ProcessGroupMesh`` lays them, last axis fastest, with
``gpus_per_node`` consecutive ranks to a node (:func:`members_per_node`).
"""

from __future__ import annotations

from helpers.cost.comm import Link, _check_n, canonical


def spanning_link(
    card: Link,
    intra: Link,
    collective: str,
    per_node: int,
    gpus_per_node: int,
    cards_per_node: int | None = None,
) -> Link:
    """The link a group sees whose members sit ``per_node`` to a node, over several nodes.

    ``card`` is one network card (per direction), ``intra`` the link inside a node (NVLink). Ring
    and tree collectives (all-reduce, all-gather, reduce-scatter) cross the network once per node
    per channel and spread the channels over the node's cards. Every GPU of a node belongs to one
    such group of the same kind and they all run at once (the data-parallel groups of a step), so
    one group gets ``cards_per_node · per_node / gpus_per_node`` cards: its bus bandwidth is that
    many cards' rate, capped by ``intra``. With one card per GPU this is ``per_node`` cards: a
    group of 8 GPUs per node has 8 cards, a group of one GPU per node (T = 8 inside the node) has
    one. All-to-all gets one card per rank (``card`` itself), whatever the placement.

    The time of a collective is then :func:`collective_time` with this link: the bytes one rank
    sends (2(N-1)/N·S for an all-reduce) are the bytes that leave its node.

    >>> ib = Link("ib", 50e9, 1e-5); nv = Link("nv", 450e9, 5e-6)
    >>> spanning_link(ib, nv, "all_reduce", 8, 8).bandwidth_bytes_per_s / 1e9   # 8 cards
    400.0
    >>> spanning_link(ib, nv, "all_reduce", 1, 8).bandwidth_bytes_per_s / 1e9   # one card
    50.0
    >>> spanning_link(ib, nv, "all_to_all", 8, 8).bandwidth_bytes_per_s / 1e9   # never aggregated
    50.0
    """
    _check_n(per_node)
    _check_n(gpus_per_node)
    cards = gpus_per_node if cards_per_node is None else cards_per_node
    _check_n(cards)
    if per_node > gpus_per_node:
        raise ValueError(f"{per_node} members per node on nodes of {gpus_per_node} GPUs")
    if canonical(collective) == "all_to_all":
        return card
    share = cards * per_node / gpus_per_node  # cards this group's node crossings spread over
    bandwidth = min(intra.bandwidth_bytes_per_s, share * card.bandwidth_bytes_per_s)
    label = card.name.split(" (")[0]
    return Link(
        f"{label} × {share:g} card{'' if share == 1 else 's'} per group",
        bandwidth,
        max(card.latency_s, intra.latency_s),
    )


def members_per_node(sizes: dict[str, int], axes: tuple[str, ...], gpus_per_node: int) -> int:
    """How many members of one group along ``axes`` share a node, for a mesh of ``sizes`` (axes
    in mesh order, outermost first, last fastest) with ``gpus_per_node`` consecutive ranks per
    node. The group of rank 0 is counted: its members' ranks are sums of index × stride.

    >>> members_per_node({"dp": 16, "tp": 8}, ("dp",), 8)   # T = 8 inside: one per node
    1
    >>> members_per_node({"dp": 16, "tp": 2}, ("dp",), 8)
    4
    """
    strides, stride = {}, 1
    for axis in reversed(list(sizes)):
        strides[axis] = stride
        stride *= sizes[axis]
    offsets = [0]
    for axis in axes:
        offsets = [
            o + i * strides[axis]
            for o in offsets
            for i in range(sizes[axis])
            if o + i * strides[axis] < gpus_per_node
        ]
    return len(offsets)
