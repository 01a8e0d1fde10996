"""TP inside a node, DP across nodes, measured: two mesh orders on two hosts with a slow link.

Chapter 5, "TP inside a node, DP across nodes, measured" (Chapter 2's mesh order, Chapter 3's cost
model). Two hosts (:class:`helpers.cluster.hosts.Hosts`), two ranks each, their link between hosts
shaped to ``rate`` (``tc`` token bucket, both directions) while the ranks of one host talk over its
loopback. :func:`measure` runs ``helpers/demos/ch05_mesh_order.py`` once across them
(:func:`helpers.cluster.multinode.launch_nodes`) and returns, as a JSON-able dict:

* the link: bytes/s of one send inside a host and across hosts;
* α and β fitted to all-reduce times inside and across (Chapter 3's calibration,
  :func:`helpers.cost.calibration.calibrate`, ``alpha_beta`` model: fitted on every other
  size, the rest held out and predicted);
* both orders of dp × tp = 2 × 2 (:func:`order_groups`): ``tp_inside`` is Colossal-AI's
  (``ProcessGroupMesh(dp, pp, tp, sp)``, last axis fastest:
  :class:`helpers.parallel.mesh.RankMesh`),
  ``tp_across`` puts tp outermost. Each: measured step time and communication share, the check
  against the unsplit model, and the cost model's prediction (:func:`predict`): measured compute
  plus :func:`helpers.cost.comm.ops_time` of Megatron's tensor-parallel all-reduces
  (:func:`helpers.cost.comm.tp_layer_ops`) on one link and the gradient all-reduce on the other.

Colossal-AI has no switch for the second order: ``HybridParallelPlugin(dp_outside=False)`` moves
pp outside dp, tp stays the fastest axis.
"""

from __future__ import annotations

import statistics

from helpers.cost.calibration import collective_table
from helpers.cost.comm import (
    Link,
    bus_bandwidth,
    comm_share,
    ops_bytes_sent,
    ops_time,
    tp_layer_ops,
)
from helpers.parallel.mesh import RankMesh
from helpers.cluster.multinode import shaped_measure

ORDERS = ("tp_inside", "tp_across")
RATE = "200mbit"  # the link between hosts: 25 MB/s, a host's loopback carried 0.5-1.8 GB/s here
FP32 = 4


def order_groups(order: str, dp: int = 2, tp: int = 2) -> dict[str, list[list[int]]]:
    """The tensor and data groups of ``order`` over dp·tp ranks, ranks numbered host by host.

    ``tp_inside``: rank = dp·T + tp (Colossal-AI's order), tensor partners are neighbours;
    ``tp_across``: rank = tp·D + dp, the same grid with the axes swapped."""
    if order == "tp_inside":
        mesh = RankMesh(dp=dp, tp=tp)
        return {"tp": mesh.groups("tp"), "dp": mesh.groups("dp")}
    if order == "tp_across":
        swapped = RankMesh(dp=tp, tp=dp)  # its dp axis is our tp axis
        return {"tp": swapped.groups("dp"), "dp": swapped.groups("tp")}
    raise ValueError(f"order must be one of {ORDERS}, not {order!r}")


def groups_inside(groups: list[list[int]], per_host: int) -> bool:
    """Whether every group lies within one host (``per_host`` consecutive ranks per host)."""
    return all(len({r // per_host for r in g}) == 1 for g in groups)


def params_per_rank(layers: int, hidden: int, tp: int) -> int:
    """Elements of one rank's shards of ``layers`` MLP blocks (A, a by columns, B by rows, b
    whole): the gradient bucket the data group all-reduces."""
    wide = 4 * hidden // tp
    return layers * (hidden * wide + wide + wide * hidden + hidden)


def step_ops(shape: dict) -> dict[str, list[tuple[str, float]]]:
    """The collectives of one step, per group: ``tp`` Megatron's all-reduces of b·s·h, four per
    pair of MLP blocks (a transformer layer's attention and MLP each do one forward and one
    backward), ``dp`` one all-reduce of the gradient bucket."""
    layers = shape["layers"]
    if layers < 2 or layers % 2:
        raise ValueError(f"layers must be even and at least 2 (two blocks per layer), got {layers}")
    tp = tp_layer_ops(shape["batch"], shape["seq"], shape["hidden"], FP32) * (layers // 2)
    bucket = params_per_rank(layers, shape["hidden"], shape["tp"]) * FP32
    return {"tp": tp, "dp": [("all_reduce", float(bucket))]}


def predict(order: str, shape: dict, links: dict[str, Link], t_compute: float) -> dict:
    """Seconds per step and communication share of ``order``: ``t_compute`` plus the tensor ops on
    the link their groups use and the gradient all-reduce on the other, no overlap (gloo on the
    CPU runs one collective at a time, between the computations)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, not {order!r}")
    tp_path, dp_path = ("inside", "across") if order == "tp_inside" else ("across", "inside")
    ops = step_ops(shape)
    tp_s = ops_time(ops["tp"], shape["tp"], links[tp_path])
    dp_s = ops_time(ops["dp"], shape["dp"], links[dp_path])
    share, _ = comm_share(tp_s + dp_s, t_compute)
    return {
        "step_s": t_compute + tp_s + dp_s,
        "comm_s": tp_s + dp_s,
        "tp_s": tp_s,
        "dp_s": dp_s,
        "share": share,
        "tp_link": tp_path,
        "dp_link": dp_path,
        "tp_bytes_per_rank": ops_bytes_sent(ops["tp"], shape["tp"]),
        "dp_bytes_per_rank": ops_bytes_sent(ops["dp"], shape["dp"]),
    }


def fit_links(rows: list[dict]) -> tuple[dict[str, Link], dict[str, list[dict]]]:
    """α and β per path (``inside``, ``across``) from the demo's all-reduce rows, with Chapter 3's
    calibration; and per path each size's measured and predicted time and role."""
    links, tables = {}, {}
    for path in ("inside", "across"):
        mine = [
            {**r, "busbw": bus_bandwidth(r["collective"], r["size_bytes"], r["n"], r["seconds"])}
            for r in rows
            if r["path"] == path
        ]
        smallest = min(r["size_bytes"] for r in mine)
        table, link = collective_table(mine, model="alpha_beta", min_bytes=smallest)
        links[path] = Link(
            f"{path} (fitted to all-reduce)", link.bandwidth_bytes_per_s, link.latency_s
        )
        busbw = {r["size_bytes"]: r["busbw"] for r in mine}
        for row in table:  # the shaped link's busbw is far below 0.1 GB/s
            del row["busbw GB/s"]
            row["busbw MB/s"] = round(busbw[row["size_bytes"]] / 1e6, 1)
        tables[path] = table
    return links, tables


def measured(per_rank: list[dict], order: str, compute: float | None = None) -> dict:
    """Per step: the slowest rank's time and the ranks' mean time inside collectives; the
    medians over steps and the median share (time inside collectives / step time). With the
    ``compute`` time, also the exposed communication step - compute and its share of the step:
    a rank waiting inside a collective for a partner that has not arrived counts as
    communication in the first share, not in the second."""
    steps = list(zip(*(r["timings"][order] for r in per_rank)))  # per step: each rank's (t, c)
    step_s = [max(t for t, _ in ranks) for ranks in steps]
    comm_s = [statistics.mean(c for _, c in ranks) for ranks in steps]
    return {
        "step_s": statistics.median(step_s),
        "comm_s": statistics.median(comm_s),
        "share": statistics.median(c / t for c, t in zip(comm_s, step_s)),
        "steps_s": step_s,
    } | ({} if compute is None else _exposed(statistics.median(step_s), compute))


def _exposed(step: float, compute: float) -> dict:
    return {"exposed_comm_s": step - compute, "exposed_share": (step - compute) / step}


def summarise(results: list[dict], rate: str) -> dict:
    """The dict of :func:`measure` from the demo's RESULT lines (sorted by rank)."""
    head = next(r for r in results if "link" in r)
    per_rank = [r for r in results if "timings" in r]
    shape = per_rank[0]["shape"]
    links, tables = fit_links(head["rows"])
    compute = measured(per_rank, "compute")["step_s"]
    orders = {}
    for order in ORDERS:
        got, model = measured(per_rank, order, compute), predict(order, shape, links, compute)
        checks = [r["checks"][order] for r in per_rank]
        orders[order] = {
            "groups": order_groups(order),
            "tp_inside_hosts": groups_inside(order_groups(order)["tp"], 2),
            "measured": got,
            "predicted": model,
            "step_error": (model["step_s"] - got["step_s"]) / got["step_s"],
            "share_error": model["share"] - got["share"],
            "exposed_share_error": model["share"] - got["exposed_share"],
            "max_loss_diff": max(c[0] for c in checks),
            "max_grad_diff": max(c[1] for c in checks),
            "ref_loss": checks[0][2],
        }
    a, b = (orders[o] for o in ORDERS)
    return {
        "rate": rate,
        "shape": shape,
        "link_bytes_per_s": head["link"],
        "link_ratio": head["link"]["inside"] / head["link"]["across"],
        "links": {
            p: {"latency_s": k.latency_s, "bandwidth_bytes_per_s": k.bandwidth_bytes_per_s}
            for p, k in links.items()
        },  # fmt: skip
        "calibration": tables,
        "compute_s": compute,
        "orders": orders,
        "speedup_measured": b["measured"]["step_s"] / a["measured"]["step_s"],
        "speedup_predicted": b["predicted"]["step_s"] / a["predicted"]["step_s"],
        "faster_measured": min(ORDERS, key=lambda o: orders[o]["measured"]["step_s"]),
        "faster_predicted": min(ORDERS, key=lambda o: orders[o]["predicted"]["step_s"]),
    }


def measure(rate: str = RATE, args: list[str] = (), timeout_s: float = 150.0) -> dict:
    """Two shaped hosts, the demo once across them and :func:`summarise`'s dict
    (:func:`helpers.cluster.multinode.shaped_measure`). Needs namespaces."""
    return shaped_measure("ch05_mesh_order", summarise, rate, args, timeout_s)
