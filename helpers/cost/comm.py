"""Communication model: bytes each rank sends per collective, bandwidths, time, per-step volumes.

Used by Chapter 3 (strategy) and its micro-benchmark ``helpers/demos/ch03_collectives.py``. Every
number here is a *model*; the benchmark measures, and :func:`fit_link` turns measurements into a
:class:`Link` that replaces the nominal presets.

Sources:

* **Ring collectives and bus bandwidth** (NVIDIA nccl-tests, ``doc/PERFORMANCE.md``). With N
  ranks and a message of S bytes a ring sends per rank: all-reduce 2(N-1)/N·S, all-gather
  (N-1)/N·S with S the *output* size, reduce-scatter (N-1)/N·S with S the *input* size, all-to-all
  (N-1)/N·S. nccl-tests reports algbw = S / t and busbw = algbw × that same factor, so busbw is
  comparable across collectives and rank counts and approaches the link's per-direction
  bandwidth.
* **Per-step data-parallel volume** (Rajbhandari et al. 2020, ZeRO, §7): DDP and ZeRO-1/2 move 2Ψ
  elements per rank per step (reduce-scatter + all-gather of the gradients = one all-reduce);
  ZeRO-3 moves 3Ψ (parameters all-gathered in forward and again in backward, gradients
  reduce-scattered). The paper quotes the large-N limit; with ``n`` given we keep the ring's
  (N-1)/N.
* **Megatron tensor parallelism** (Shoeybi et al. 2019, Megatron-LM, §3, Fig. 4): per transformer
  layer 2 all-reduces of the b·s·h activations in forward (after attention and after the MLP) and
  2 in backward. **Sequence parallelism** (Korthikanti et al. 2022, §4.2.2) replaces each
  all-reduce by an all-gather plus a reduce-scatter of the same volume.
* **Ulysses** (Jacobs et al. 2023, DeepSpeed-Ulysses, §3.2): all-to-all of Q, K, V and of the
  attention output, per layer 4·b·s·h/P elements per rank in forward (the same again in backward).
* **Pipeline bubble**: see :func:`helpers.parallel.pp.bubble_fraction` (one home for it).
* **Groups that span nodes**: :mod:`helpers.cost.placement` (which link a group sees).
* **Seed rule**: share = t_comm / (t_comm + t_compute); above 0.5 the seed advises lowering TP,
  raising the batch, or overlapping (Chapter 3, "Step 3: is communication the bottleneck?").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
# torch.distributed names of the tensor variants the benchmark calls (and its records keep)
ALIASES = {
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "all_to_all_single": "all_to_all",
}


def canonical(collective: str) -> str:
    """The collective's name in :data:`COLLECTIVES`: ``all_gather_into_tensor`` -> ``all_gather``
    (:data:`ALIASES`); a ValueError for a name that is neither."""
    name = ALIASES.get(collective, collective)
    if name not in COLLECTIVES:
        raise ValueError(
            f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES + tuple(ALIASES))}"
        )
    return name


def _check_n(n) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"number of ranks n must be an integer >= 1, got {n!r}")


def _check_nonneg(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw/algbw factor: 2(n-1)/n for all-reduce, (n-1)/n for the other three."""
    name = canonical(collective)
    _check_n(n)
    return (2.0 if name == "all_reduce" else 1.0) * (n - 1) / n


def bytes_sent(collective: str, size_bytes: float, n: int) -> float:
    """Bytes one rank sends in a ring collective on a message of S = ``size_bytes``.

    S is the buffer nccl-tests reports: the all-gather output, the reduce-scatter input, the
    all-reduce / all-to-all buffer. E.g. N = 8, S = 1 GB all-reduce: 2·7/8 = 1.75 GB.
    """
    _check_nonneg("size_bytes", size_bytes)
    return bus_factor(collective, n) * size_bytes


def alg_bandwidth(size_bytes: float, seconds: float) -> float:
    """Algorithm bandwidth S / t in bytes/s (nccl-tests ``algbw``)."""
    _check_nonneg("size_bytes", size_bytes)
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    return size_bytes / seconds


def bus_bandwidth(collective: str, size_bytes: float, n: int, seconds: float) -> float:
    """Bus bandwidth algbw × :func:`bus_factor` in bytes/s (nccl-tests ``busbw``)."""
    return alg_bandwidth(size_bytes, seconds) * bus_factor(collective, n)


@dataclass(frozen=True)
class Link:
    """A link for the α-β model: t = latency_s + bytes sent per rank / bandwidth_bytes_per_s."""

    name: str
    bandwidth_bytes_per_s: float  # per direction, comparable to nccl-tests busbw
    latency_s: float

    def __post_init__(self):
        if not self.bandwidth_bytes_per_s > 0:
            raise ValueError(f"bandwidth must be positive, got {self.bandwidth_bytes_per_s!r}")
        _check_nonneg("latency_s", self.latency_s)


# NOMINAL datasheet values, to be replaced by fit_link() on measurements. Assumptions, stated:
# * NVLink 4 (H100/H200 SXM): NVIDIA datasheets give 900 GB/s *total bidirectional* NVLink
#   bandwidth per GPU (18 links × 50 GB/s); we take half, 450 GB/s per direction, as the ceiling for
#   busbw. Measured NCCL all-reduce busbw on 8 GPUs is typically lower (~350-480 GB/s with NVLS;
#   measure).
# * InfiniBand NDR: 400 Gb/s per port = 50 GB/s per direction, one NIC per GPU assumed.
# * PCIe Gen5 x16: 32 GT/s × 16 lanes, 128b/130b → ~63 GB/s per direction.
# Latencies are assumed orders of magnitude (a few µs per collective), not datasheet figures.
NOMINAL_LINKS = {
    "nvlink4": Link(
        "NVLink 4, H100/H200 SXM (nominal: 450 GB/s per direction, 5 µs assumed)", 450e9, 5e-6
    ),
    "ib_ndr": Link(
        "InfiniBand NDR 400 Gb/s (nominal: 50 GB/s per direction, 10 µs assumed)", 50e9, 10e-6
    ),
    "pcie5": Link("PCIe Gen5 x16 (nominal: ~63 GB/s per direction, 10 µs assumed)", 63e9, 10e-6),
}


def ring_steps(collective: str, n: int) -> int:
    """Communication steps of the ring algorithm: 2(n-1) for all-reduce (reduce-scatter then
    all-gather), n-1 for the other three (Thakur, Rabenseifner & Gropp 2005, Table 1 and §4)."""
    _check_n(n)
    return (2 if canonical(collective) == "all_reduce" else 1) * (n - 1)


def collective_time(
    collective: str, size_bytes: float, n: int, link: Link, per_step: bool = False
) -> float:
    """Modelled seconds: link.latency_s + :func:`bytes_sent` / link.bandwidth (0 when n = 1).

    ``per_step=True`` reads ``link.latency_s`` as the latency of one ring step and charges
    :func:`ring_steps` of them (the Hockney/Thakur cost ``steps·α + bytes·β``): an all-reduce then
    pays twice the latency of an all-gather, as its ring runs twice as many steps.
    """
    # [start: collective-time]
    volume = bytes_sent(collective, size_bytes, n)
    if n == 1:
        return 0.0
    latency = link.latency_s * (ring_steps(collective, n) if per_step else 1)
    return latency + volume / link.bandwidth_bytes_per_s
    # [end: collective-time]


def fit_link(
    samples: Iterable[tuple[float, float]],
    name: str = "fitted",
    collective: str | None = None,
    n: int | None = None,
    relative: bool = False,
) -> Link:
    """Least-squares fit of t = α + x/β to measured (size_bytes, seconds) points.

    x is the size itself, or, with ``collective`` and ``n``, the bytes sent per rank, so the fitted
    β is a bus bandwidth and ``collective_time(collective, S, n, link)`` reproduces the points.
    ``relative=True`` minimises the relative errors Σ((α + x/β - t)/t)² (weights 1/t²) instead of
    the absolute ones, so that over sizes spanning 1 MB..1 GB the largest message does not decide α
    alone.
    """
    points = [(float(s), float(t)) for s, t in samples]
    if collective is not None:
        if n is None:
            raise ValueError("fit_link with a collective needs n, the number of ranks")
        points = [(bytes_sent(collective, s, n), t) for s, t in points]
    if len({x for x, _ in points}) < 2:
        raise ValueError(f"fit_link needs at least two distinct sizes, got {len(points)} point(s)")
    w = [1.0 / t**2 if relative and t > 0 else 1.0 for _, t in points]
    k = sum(w)
    mx = sum(wi * x for wi, (x, _) in zip(w, points)) / k
    mt = sum(wi * t for wi, (_, t) in zip(w, points)) / k
    slope = sum(wi * (x - mx) * (t - mt) for wi, (x, t) in zip(w, points)) / sum(
        wi * (x - mx) ** 2 for wi, (x, _) in zip(w, points)
    )
    if slope <= 0:
        raise ValueError(
            f"time does not grow with size (slope {slope:.3g} s/B): measure larger messages"
        )
    return Link(name, 1.0 / slope, max(0.0, mt - slope * mx))


# --- per-step volumes: lists of (collective, message bytes S) and their totals


def zero_step_volume(
    params: float, stage: int, n: int | None = None, bytes_per_element: int = 2
) -> float:
    """Bytes one data-parallel rank sends per step (ZeRO §7): 2Ψ for DDP / ZeRO-1/2, 3Ψ for ZeRO-3.

    Without ``n`` the paper's large-N value (2Ψ or 3Ψ elements × bytes); with ``n`` the ring's
    (n-1)/n.
    """
    _check_nonneg("params", params)
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}")
    factor = 1.0
    if n is not None:
        _check_n(n)
        factor = (n - 1) / n
    return (3 if stage == 3 else 2) * factor * params * bytes_per_element


def tp_layer_ops(
    b: int,
    s: int,
    h: int,
    bytes_per_element: int = 2,
    sequence_parallel: bool = False,
    backward: bool = True,
) -> list[tuple[str, float]]:
    """Megatron TP per layer: 2 all-reduces of b·s·h forward, 2 backward (Shoeybi et al. 2019).

    With sequence parallelism each all-reduce becomes an all-gather + a reduce-scatter of S = b·s·h
    (full-size output and input respectively), the same bytes per rank.
    """
    for name, v in (("b", b), ("s", s), ("h", h)):
        _check_nonneg(name, v)
    size = float(b * s * h * bytes_per_element)
    one = (
        [("all_gather", size), ("reduce_scatter", size)]
        if sequence_parallel
        else [("all_reduce", size)]
    )
    return one * (4 if backward else 2)


def ulysses_layer_ops(
    b: int, s: int, h: int, p: int, bytes_per_element: int = 2, backward: bool = True
) -> list[tuple[str, float]]:
    """DeepSpeed-Ulysses per layer: all-to-all of Q, K, V and the output, each of b·(s/P)·h per
    rank.

    Forward sends 4·(P-1)/P·b·s·h/P elements per rank (≈ 4·b·s·h/P, the paper's figure); backward
    again.
    """
    for name, v in (("b", b), ("s", s), ("h", h)):
        _check_nonneg(name, v)
    _check_n(p)
    return [("all_to_all", float(b * s * h * bytes_per_element) / p)] * (8 if backward else 4)


def ops_bytes_sent(ops: Iterable[tuple[str, float]], n: int) -> float:
    """Total bytes one rank sends for a list of (collective, S) over n ranks."""
    return added(bytes_sent(c, size, n) for c, size in ops)


def ops_time(ops: Iterable[tuple[str, float]], n: int, link: Link) -> float:
    """Modelled seconds for a list of (collective, S): one latency per collective, no overlap."""
    return added(collective_time(c, size, n, link) for c, size in ops)


def added(values: Iterable[float]) -> float:
    """The values added left to right, as ``sum`` did up to Python 3.11: from 3.12 on ``sum``
    compensates float rounding, so a model that used it would answer differently in the last bit
    under another Python (Pyodide's, on the calculator page) and rank tied layouts differently."""
    total = 0
    for v in values:
        total += v
    return total


SEED_ADVICE = (
    "communication share above 0.5: more than half of each step moves data. The seed's remedies: "
    "lower the tensor-parallel degree to keep more computation on each GPU, "
    "raise the batch so that "
    "computation grows and hides communication, or overlap communication with computation."
)


def comm_share(t_comm: float, t_compute: float) -> tuple[float, str | None]:
    """The seed's communication share t_comm / (t_comm + t_compute), and its advice when above
    0.5."""
    _check_nonneg("t_comm", t_comm)
    _check_nonneg("t_compute", t_compute)
    if t_comm + t_compute == 0:
        raise ValueError("t_comm + t_compute must be positive")
    share = t_comm / (t_comm + t_compute)
    return share, (SEED_ADVICE if share > 0.5 else None)
