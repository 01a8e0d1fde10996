"""helpers.cost.comm: ring volumes, nccl-tests bus-bandwidth factors, the α-β fit, per-step
volumes, the seed rule, input errors, and one 2-rank run of the Chapter 3 collectives benchmark
(no timing thresholds)."""

import pytest

from helpers.cost.comm import (
    COLLECTIVES,
    NOMINAL_LINKS,
    SEED_ADVICE,
    Link,
    alg_bandwidth,
    bus_bandwidth,
    bus_factor,
    bytes_sent,
    collective_time,
    comm_share,
    fit_link,
    ops_bytes_sent,
    ops_time,
    tp_layer_ops,
    ulysses_layer_ops,
    zero_step_volume,
)
from helpers.run.launch import launch
from helpers.parallel.pp import bubble_fraction

GB = 1e9


def test_ring_volumes_hand_values():
    """N = 8, S = 1 GB: all-reduce 2·7/8 = 1.75 GB; the other three 7/8 = 0.875 GB."""
    assert bytes_sent("all_reduce", GB, 8) == pytest.approx(1.75 * GB)
    for c in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bytes_sent(c, GB, 8) == pytest.approx(0.875 * GB)
    assert bytes_sent("all_reduce", GB, 2) == pytest.approx(GB)  # 2·1/2
    assert bytes_sent("all_reduce", GB, 1) == 0.0  # nothing to send alone
    # all-reduce = reduce-scatter + all-gather of the same S
    assert bytes_sent("all_reduce", GB, 8) == pytest.approx(
        bytes_sent("reduce_scatter", GB, 8) + bytes_sent("all_gather", GB, 8)
    )


@pytest.mark.parametrize(
    "name, n, factor",
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 4, 1.5),
        ("all_reduce", 8, 1.75),
        ("all_gather_into_tensor", 4, 0.75),
        ("reduce_scatter_tensor", 8, 0.875),
        ("all_to_all_single", 2, 0.5),
    ],
)
def test_bus_factors_nccl_tests(name, n, factor):
    assert bus_factor(name, n) == pytest.approx(factor)
    # 1 GB in 10 ms: algbw 100 GB/s, busbw = algbw × factor
    assert alg_bandwidth(GB, 0.01) == pytest.approx(100 * GB)
    assert bus_bandwidth(name, GB, n, 0.01) == pytest.approx(100 * GB * factor)


def test_time_model_and_presets():
    link = Link("test", 100 * GB, 1e-5)
    assert collective_time("all_reduce", GB, 8, link) == pytest.approx(
        1e-5 + 1.75 * GB / (100 * GB)
    )
    assert collective_time("all_reduce", GB, 1, link) == 0.0
    assert (
        NOMINAL_LINKS["nvlink4"].bandwidth_bytes_per_s == 450e9
        and NOMINAL_LINKS["ib_ndr"].bandwidth_bytes_per_s == 50e9
    )
    assert all("nominal" in lk.name for lk in NOMINAL_LINKS.values())
    ops = [("all_reduce", GB), ("all_gather", GB)]
    assert ops_time(ops, 8, link) == pytest.approx(2e-5 + (1.75 + 0.875) * GB / (100 * GB))


def test_fit_link_recovers_latency_and_bandwidth_exactly():
    truth = Link("truth", 37.5 * GB, 23e-6)
    sizes = [2**k for k in range(10, 31, 4)]
    raw = fit_link([(s, truth.latency_s + s / truth.bandwidth_bytes_per_s) for s in sizes])
    assert raw.latency_s == pytest.approx(
        23e-6, rel=1e-9
    ) and raw.bandwidth_bytes_per_s == pytest.approx(37.5 * GB, rel=1e-9)
    # per collective: the fitted link reproduces the points through collective_time
    pts = [(s, collective_time("all_reduce", s, 8, truth)) for s in sizes]
    fitted = fit_link(pts, collective="all_reduce", n=8)
    assert fitted.latency_s == pytest.approx(23e-6, rel=1e-9)
    assert fitted.bandwidth_bytes_per_s == pytest.approx(37.5 * GB, rel=1e-9)
    with pytest.raises(ValueError, match="two distinct sizes"):
        fit_link([(1024, 1e-3), (1024, 2e-3)])
    with pytest.raises(ValueError, match="does not grow"):
        fit_link([(1024, 2e-3), (4096, 1e-3)])
    with pytest.raises(ValueError, match="needs n"):
        fit_link(pts, collective="all_reduce")


def test_per_step_volumes():
    psi = 1e9
    # ZeRO §7: 2Ψ (DDP, ZeRO-1/2) and 3Ψ (ZeRO-3) in the large-N limit; bf16 → ×2 bytes
    assert [zero_step_volume(psi, st) for st in range(4)] == [4 * GB, 4 * GB, 4 * GB, 6 * GB]
    assert zero_step_volume(psi, 0, n=8) == pytest.approx(2 * 7 / 8 * 2 * GB)
    assert zero_step_volume(psi, 3, n=8, bytes_per_element=4) == pytest.approx(3 * 7 / 8 * 4 * GB)
    # Megatron TP: 4 all-reduces per layer of b·s·h·2 bytes (2 fwd + 2 bwd)
    b, s, h, t = 1, 2048, 4096, 8
    S = b * s * h * 2
    ops = tp_layer_ops(b, s, h)
    assert ops == [("all_reduce", S)] * 4 and len(tp_layer_ops(b, s, h, backward=False)) == 2
    assert ops_bytes_sent(ops, t) == pytest.approx(4 * 2 * 7 / 8 * S)
    sp = tp_layer_ops(b, s, h, sequence_parallel=True)
    assert sorted(set(c for c, _ in sp)) == ["all_gather", "reduce_scatter"] and len(sp) == 8
    assert ops_bytes_sent(sp, t) == pytest.approx(
        ops_bytes_sent(ops, t)
    )  # same volume (Korthikanti §4.2.2)
    # Ulysses: forward 4·b·s·h/P elements per rank in the large-P limit
    p = 8
    fwd = ulysses_layer_ops(b, s, h, p, backward=False)
    assert ops_bytes_sent(fwd, p) == pytest.approx(4 * b * s * h / p * 2 * (p - 1) / p)
    assert len(ulysses_layer_ops(b, s, h, p)) == 8


def test_pipeline_bubble():
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert bubble_fraction(4, 8, chunks=2) == pytest.approx((3 / 16) / (1 + 3 / 16))
    assert bubble_fraction(1, 8) == 0.0


def test_seed_rule():
    share, advice = comm_share(0.6, 0.4)
    assert share == pytest.approx(0.6) and advice == SEED_ADVICE and "tensor-parallel" in advice
    share, advice = comm_share(0.4, 0.6)
    assert share == pytest.approx(0.4) and advice is None
    assert comm_share(0.5, 0.5)[1] is None  # "above 0.5", strictly


def test_bad_inputs():
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        bytes_sent("all_reduce", GB, 0)
    with pytest.raises(ValueError, match="non-negative"):
        bytes_sent("all_reduce", -1, 8)
    with pytest.raises(ValueError) as err:
        bus_factor("broadcast", 8)
    assert all(c in str(err.value) for c in COLLECTIVES)
    with pytest.raises(ValueError, match="seconds must be positive"):
        alg_bandwidth(GB, 0)
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        Link("x", 0, 0)
    with pytest.raises(ValueError, match="stage"):
        zero_step_volume(1e9, 4)
    with pytest.raises(ValueError):
        bubble_fraction(4, 0)
    with pytest.raises(ValueError, match="positive"):
        comm_share(0, 0)


def test_benchmark_two_ranks():
    """Every collective and size has a positive time, and busbw = algbw × the nccl-tests factor."""
    sizes = [1024, 8192]
    run = launch(
        "ch03_collectives",
        nproc=2,
        args=["--sizes", ",".join(map(str, sizes)), "--warmup", "1", "--iters", "3"],
        timeout_s=120,
        show="none",
    )
    rows = {(r["collective"], r["size_bytes"]): r for r in run.rank(0)}
    names = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")
    assert set(rows) == {(c, s) for c in names for s in sizes}
    for (c, s), r in rows.items():
        assert r["seconds"] > 0 and r["n"] == 2
        assert r["algbw"] == pytest.approx(s / r["seconds"])
        assert r["busbw"] == pytest.approx(r["algbw"] * bus_factor(c, 2))
    assert (
        rows[("all_reduce", 1024)]["factor"] == 1.0
        and rows[("all_to_all_single", 1024)]["factor"] == 0.5
    )
    table = "\n".join(run.lines[0])
    assert "busbw GB/s" in table and "fit all_reduce" in table


def test_ring_steps_latency_per_step():
    """Thakur et al.: ring all-reduce takes 2(n-1) steps, the others n-1; per_step charges α per
    step."""
    from helpers.cost.comm import ring_steps

    assert [ring_steps(c, 8) for c in COLLECTIVES] == [14, 7, 7, 7]
    link = Link("x", 100e9, 2e-6)
    assert collective_time("all_reduce", 0, 2, link, per_step=True) == pytest.approx(4e-6)
    assert collective_time("all_gather", 0, 2, link, per_step=True) == pytest.approx(2e-6)
    assert collective_time("all_gather", GB, 2, link) == pytest.approx(2e-6 + 0.5 * GB / 100e9)
