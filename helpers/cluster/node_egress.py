"""A ring leaves the node once, measured: all-reduce across two hosts, one rank per host or two.

Chapter 5, "A ring leaves the node once" (Chapter 3's cost model, :mod:`helpers.cost.comm`). Two
hosts (:class:`helpers.cluster.hosts.Hosts`), each with one shaped link (``tc`` token bucket to
``rate`` both ways: the host's one "network card") while its ranks talk over loopback.
:func:`measure` runs ``helpers/demos/ch05_node_egress.py`` once across them
(:func:`helpers.cluster.multinode.launch_nodes`): all-reduce of every size over ranks {0, 2} (N = 2,
one rank per host) and over all four (N = 4, ranks 0, 1 on host 0 and 2, 3 on host 1), and
returns, as a JSON-able dict, the rows of :func:`summarise`.

The two models it puts beside the times (:func:`predict`):

* **per node** (:func:`helpers.cost.placement.spanning_link`): a ring crosses the network once
  per node, so the bytes that leave a node are one rank's 2(N-1)/N·M (nccl-tests
  ``doc/PERFORMANCE.md``),
  spread over the node's cards: M for N = 2, 1.5 M for N = 4, ratio 1.5;
* **per rank** (what the book's model charged before): every rank of the node sends its
  2(N-1)/N·M through the node's cards, ``per_node`` times as many bytes: 3 M for N = 4, ratio 3.

The card's α and β come from the N = 2 run (:func:`helpers.cost.comm.fit_link` on the median
times, relative errors, as Chapter 3's calibration fits them): both models agree there, and the
N = 4 rows are predictions the fit never saw.
"""

from __future__ import annotations

import statistics

from helpers.cost.comm import Link, collective_time, fit_link
from helpers.cost.placement import spanning_link
from helpers.cluster.multinode import shaped_measure

RATE = "200mbit"  # one host's card: 25 MB/s; a host's loopback carried about 2 GB/s here
TOLERANCE = 0.25  # the book's tolerance for a collective's predicted time
MODELS = ("per_node", "per_rank")


def per_rank_link(card: Link, per_node: int, gpus_per_node: int, cards_per_node: int) -> Link:
    """The link the per-rank model gives each rank: its share of the node's cards,
    ``card · cards_per_node / gpus_per_node``, while every one of the node's ``per_node`` group
    members sends its own 2(N-1)/N·S through them. With one card per GPU that is one card per rank
    (the model's old assumption); the node's egress is then ``per_node`` × one rank's bytes."""
    if per_node > gpus_per_node:
        raise ValueError(f"{per_node} members per node on nodes of {gpus_per_node} GPUs")
    share = cards_per_node / gpus_per_node
    return Link(f"{card.name} × {share:g} per rank", share * card.bandwidth_bytes_per_s,
                card.latency_s)  # fmt: skip


def predict(size: int, n: int, per_node: int, card: Link, intra: Link, cards: int = 1) -> dict:
    """Seconds of an all-reduce of ``size`` bytes over ``n`` ranks, ``per_node`` of them on each
    node of ``per_node`` ranks and ``cards`` cards, under both models (see the module's text):
    :func:`helpers.cost.comm.collective_time` on the link each model gives the group."""
    node = spanning_link(card, intra, "all_reduce", per_node, per_node, cards)
    rank = per_rank_link(card, per_node, per_node, cards)
    return {
        "per_node": collective_time("all_reduce", size, n, node),
        "per_rank": collective_time("all_reduce", size, n, rank),
        "per_node_egress_bytes": 2 * (n - 1) / n * size,
        "per_rank_egress_bytes": per_node * 2 * (n - 1) / n * size,
    }


def fit_card(seconds: dict[str, list[float]], sizes: list[int]) -> Link:
    """α and β of one host's card from the N = 2 medians: each rank sends M there, all of it
    through its host's card (Chapter 3's fit, relative errors)."""
    points = [(s, statistics.median(seconds[f"2/{s}"])) for s in sizes]
    fitted = fit_link(points, collective="all_reduce", n=2, relative=True)
    return Link("one host's card (fitted, N = 2)", fitted.bandwidth_bytes_per_s, fitted.latency_s)


def summarise(results: list[dict], rate: str) -> dict:
    """The dict of :func:`measure` from the demo's RESULT lines: per size and N the median time
    beside both models and the bytes each host sent (median over the repeats), the ratios
    t(N = 4) / t(N = 2), and the check against the sum computed alone."""
    head = next(r for r in results if "seconds" in r)
    hosts = [r["egress"] for r in sorted(results, key=lambda r: r.get("host", -1)) if "egress" in r]
    sizes = sorted({int(k.split("/")[1]) for k in head["seconds"]})
    card = fit_card(head["seconds"], sizes)
    intra = Link("loopback (one send)", head["link"]["inside"], 0.0)
    rows, ratios = [], []
    for size in sizes:
        got = {}
        for n, per_node in ((2, 1), (4, 2)):
            times = head["seconds"][f"{n}/{size}"]
            t = got[n] = statistics.median(times)
            model = predict(size, n, per_node, card, intra)
            sent = [statistics.median(h[f"{n}/{size}"]) for h in hosts]  # per host
            rows.append({"ranks_per_host": per_node, "n": n, "size_bytes": size, "seconds": t,
                         "repeats": times, **model,
                         **{f"ratio_{m}": t / model[m] for m in MODELS},
                         "egress_bytes": sent, "egress_per_message": max(sent) / size})  # fmt: skip
        ratios.append({"size_bytes": size, "measured": got[4] / got[2], "per_node": 1.5,
                       "per_rank": 3.0})  # fmt: skip
    measured = statistics.median(r["measured"] for r in ratios)
    return {
        "rate": rate,
        "rate_bytes_per_s": tc_rate(rate),
        "link_bytes_per_s": head["link"],
        "card": {"latency_s": card.latency_s, "bandwidth_bytes_per_s": card.bandwidth_bytes_per_s},
        "members": head["members"],
        "checks": head["checks"],
        "all_correct": head["all_correct"],
        "rows": rows,
        "ratios": ratios,
        "ratio_measured": measured,
        "ratio_nearer": min(MODELS, key=lambda m: abs(measured - ratios[0][m])),
        "worst_per_node_error": max(abs(r["ratio_per_node"] - 1) for r in rows),
        "within_tolerance": all(abs(r["ratio_per_node"] - 1) <= TOLERANCE for r in rows),
    }


def tc_rate(rate: str) -> float:
    """Bytes/s of a ``tc`` rate such as "200mbit" (decimal units, as ``tc`` reads them)."""
    units = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3, "bit": 1.0}
    unit = next(u for u in units if rate.endswith(u))
    return float(rate[: -len(unit)]) * units[unit] / 8


def measure(rate: str = RATE, args: list[str] = (), timeout_s: float = 150.0) -> dict:
    """Two shaped hosts, the demo once across them and :func:`summarise`'s dict
    (:func:`helpers.cluster.multinode.shaped_measure`). Needs namespaces."""
    return shaped_measure("ch05_node_egress", summarise, rate, args, timeout_s)
