"""helpers.cluster.node_egress: a ring all-reduce leaves a node once (two hosts, shaped link).

One real run (two hosts in network namespaces, 2 ranks each, gloo, each host's link shaped to
200 Mbit/s), shared through :func:`helpers.run.shared.once` with Chapter 5's notebook; the same
bounds on the recording the notebook shows where namespaces are impossible; and fast unit tests
of the two models.
"""

import shutil

import pytest

from helpers.chapters import ch05_multinode
from helpers.cost.comm import Link
from helpers.cluster import node_egress as ne
from helpers.cluster.hosts import namespaces_possible

WHY_NOT = namespaces_possible() or (None if shutil.which("tc") else "no tc command")
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"no shaped hosts: {WHY_NOT}")


@pytest.fixture(scope="module")
def run():
    try:
        return ch05_multinode.result("node_egress")  # the run Chapter 5's notebook shows
    except OSError as e:  # a kernel without the tbf queueing discipline
        if str(e).startswith("tc "):
            pytest.skip(f"the link cannot be shaped here: {e}")
        raise


def check_bounds(run: dict) -> None:
    """What the page claims: every all-reduce equals the sum computed alone, the per-node model
    is within the book's ±25 % on every row, the time ratio N = 4 / N = 2 is nearer 1.5 than 3,
    and the bytes that left a host are one rank's 2(N-1)/N·M (plus TCP/IP and Ethernet headers)."""
    assert run["all_correct"] and all(run["checks"].values()), run["checks"]
    assert run["members"] == {"2": [0, 2], "4": [0, 1, 2, 3]}
    for row in run["rows"]:
        assert abs(row["ratio_per_node"] - 1) <= ne.TOLERANCE, row
        if row["n"] == 4:  # the per-rank model is twice as slow as what was measured
            assert row["ratio_per_rank"] < 0.6, row
        for sent in row["egress_bytes"]:  # headers add about 5 %
            assert 1.0 < sent / row["per_node_egress_bytes"] < 1.15, row
    assert abs(run["ratio_measured"] - 1.5) < abs(run["ratio_measured"] - 3.0)
    assert run["ratio_nearer"] == "per_node" and run["within_tolerance"]
    # the card fitted on N = 2 is the shaped rate, less the headers
    assert (
        0.85 * run["rate_bytes_per_s"]
        < run["card"]["bandwidth_bytes_per_s"]
        < run["rate_bytes_per_s"]
    )


@needs_namespaces
def test_a_ring_all_reduce_sends_one_ranks_bytes_out_of_each_host(run):
    assert run["source"] == "live" and "tbf" in run["tc"] and "rate 200Mbit" in run["tc"]
    assert run["link_bytes_per_s"]["inside"] > 10 * run["link_bytes_per_s"]["across"]
    check_bounds(run)


def test_the_recording_the_notebook_shows_holds_the_same_bounds():
    recorded = ch05_multinode.recorded("node_egress")
    assert recorded is not None, "record it: sudo python -m helpers.record multinode --record"
    check_bounds(recorded)


# --- the models, without hosts ------------------------------------------------------------

CARD, LOOP = Link("card", 25e6, 1e-3), Link("loopback", 2e9, 0.0)


def test_per_node_charges_one_ranks_bytes_and_per_rank_every_ranks():
    one = ne.predict(16 * 2**20, 2, 1, CARD, LOOP)
    two = ne.predict(16 * 2**20, 4, 2, CARD, LOOP)
    assert one["per_node"] == one["per_rank"] == pytest.approx(1e-3 + 16 * 2**20 / 25e6)
    assert two["per_node"] == pytest.approx(1e-3 + 1.5 * 16 * 2**20 / 25e6)
    assert two["per_rank"] == pytest.approx(1e-3 + 3.0 * 16 * 2**20 / 25e6)
    assert two["per_rank_egress_bytes"] == 2 * two["per_node_egress_bytes"] == 3 * 16 * 2**20


def test_one_card_per_gpu_makes_the_per_rank_model_one_card_per_rank():
    assert ne.per_rank_link(CARD, 8, 8, 8).bandwidth_bytes_per_s == 25e6
    assert ne.per_rank_link(CARD, 2, 2, 1).bandwidth_bytes_per_s == 12.5e6
    with pytest.raises(ValueError, match="members per node"):
        ne.per_rank_link(CARD, 3, 2, 1)
    assert ne.tc_rate("200mbit") == 25e6 and ne.tc_rate("1gbit") == 125e6


def test_the_summary_fits_the_card_on_one_rank_per_host():
    sizes = [2**21, 2**22]
    times = {f"2/{s}": [s / 20e6] * 3 for s in sizes} | {f"4/{s}": [1.5 * s / 20e6] for s in sizes}
    egress = {k: [1] for k in times}  # bytes the host sent: not checked here
    head = {"seconds": times, "link": {"inside": 2e9, "across": 20e6}, "members": {},
            "checks": {}, "all_correct": True}  # fmt: skip
    got = ne.summarise([head, {"host": 0, "egress": egress}], "160mbit")
    assert got["card"]["bandwidth_bytes_per_s"] == pytest.approx(20e6)
    assert got["ratio_measured"] == pytest.approx(1.5) and got["ratio_nearer"] == "per_node"
    assert all(r["ratio_per_node"] == pytest.approx(1.0, abs=1e-6) for r in got["rows"])
