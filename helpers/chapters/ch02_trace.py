"""Chapter 2, "One step as a trace": the notebook's glue for ``helpers/demos/ch02_trace.py``.

:func:`run` launches the demo (4 ranks, D = T = 2, both orders of the gradient all-reduce; a test
and the notebook share the launch within one test run), :func:`expected_collectives` counts the
collectives a rank must enter from the model, :func:`overlap_shares` gives the share of
communication under compute in each order (the notebook asserts both against their bounds in its
cell; :func:`check` asserts everything for the tests) and :func:`rows` gives the table of
milliseconds; :func:`helpers.figures.ch02_trace.trace_figure` draws every rank's step.
"""

from __future__ import annotations

from helpers.notebook.measured import approx
from helpers.run.launch import LaunchResult, launch
from helpers.train.trace import traces_of
from helpers.run.result_types.ch02 import TraceResult

NPROC, TP, LAYERS, ROWS = 4, 2, 4, 256
ARGS = ["--tp", str(TP), "--layers", str(LAYERS), "--rows", str(ROWS)]
ORDERS = ("after", "overlap")
TOLERANCE = 1e-5  # fp32 gradients against the unsplit model
# sync collectives leave no compute beside them; the clocks of two threads leave a sliver
AFTER_HIDDEN_MAX = 0.02


def run(show: str = "rank0") -> LaunchResult:
    """The demo on 4 ranks (``show``: what of the ranks' lines to stream, as for ``launch``)."""
    return launch("ch02_trace", nproc=NPROC, args=ARGS, timeout_s=300, show=show)


def expected_collectives(layers: int, tp: int, dp: int, pp: int = 1, stage: int = 0) -> int:
    """Collectives one rank of pipeline stage ``stage`` enters in one step of one micro-batch:
    g's all-reduce in every block's forward and f's in every backward when T > 1, except f in the
    first stage's first block (its input needs no gradient); one all-reduce per parameter tensor
    (A, a, B, b of every block) when D > 1; and with P > 1 a send and a recv towards each
    neighbouring stage (activations forward, gradients back)."""
    per_stage = layers // pp
    tensor = (2 * per_stage - (stage == 0)) if tp > 1 else 0
    data = 4 * per_stage if dp > 1 else 0
    return tensor + data + 2 * (stage > 0) + 2 * (stage < pp - 1)


def expected_for(r: TraceResult) -> int:
    """:func:`expected_collectives` for the rank that reported ``r``, from its own layout."""
    return expected_collectives(r["layers"], r["tp"], r["dp"], r["pp"], r["coords"]["pp"])


def collective_counts() -> dict[str, int]:
    """Collectives per rank and step of the demo's layout (D = T = 2), of T alone and of D alone,
    under the keys the page glues."""
    return {
        "ch02-trace-collectives": expected_collectives(LAYERS, tp=TP, dp=NPROC // TP),
        "ch02-trace-tp": expected_collectives(LAYERS, tp=TP, dp=1),
        "ch02-trace-dp": expected_collectives(LAYERS, tp=1, dp=NPROC // TP),
    }


def check(results: list[TraceResult]) -> dict:
    """Raise unless every rank's gradients matched, every trace holds exactly the collectives
    the model implies, the ``after`` order hid (almost) nothing and the ``overlap`` order computed
    under its gradient all-reduces on every rank; return the exact facts."""
    counts = set()
    for r in results:
        assert r["max_grad_diff"] <= TOLERANCE, r
        want = expected_for(r)
        assert r["trace"]["collectives"] == want, (r["rank"], r["order"], r["trace"]["names"])
        counts.add(want)
    after, overlap = traces_of(results, "after"), traces_of(results, "overlap")
    assert len(after) == len(overlap) == NPROC
    for rank in after:
        hidden = after[rank].numbers()["hidden_share"]
        assert hidden <= AFTER_HIDDEN_MAX, f"rank {rank}: {hidden:.3f} hidden after the backward"
        assert overlap[rank].numbers()["overlapped_ms"] > 0, f"rank {rank}: nothing overlapped"
    return {
        "collectives per rank and step": " or ".join(map(str, sorted(counts))),
        "gradients match": True,
    }


def rows(results: list[TraceResult]) -> list[dict]:
    """One row per order and rank: milliseconds of the step and its parts (measured: ≈)."""
    out = []
    for order in ORDERS:
        for rank, t in sorted(traces_of(results, order).items()):
            n = t.numbers()
            out.append(
                {
                    "order": order,
                    "rank": rank,
                    "step": approx(n["step_ms"], ".1f", " ms"),
                    "compute": approx(n["compute_ms"], ".1f", " ms"),
                    "communication": approx(n["communication_ms"], ".1f", " ms"),
                    "of it under compute": approx(n["overlapped_ms"], ".1f", " ms"),
                    "idle": approx(n["idle_ms"], ".1f", " ms"),
                }
            )
    return out


def totals(results: list[TraceResult], order: str) -> dict[str, float]:
    """Milliseconds summed over the ranks, and the share of communication under compute."""
    sums: dict[str, float] = {}
    for t in traces_of(results, order).values():
        for k, v in t.numbers().items():
            sums[k] = sums.get(k, 0.0) + v
    sums["hidden_share"] = sums["overlapped_ms"] / sums["communication_ms"]
    return sums


def overlap_shares(results: list[TraceResult]) -> dict[str, float]:
    """The share of communication under compute, summed over the ranks, for each order."""
    return {order: totals(results, order)["hidden_share"] for order in ORDERS}
