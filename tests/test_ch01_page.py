"""Chapter 1's running example, its ring figure and its mask trap, computed, and the page that
shows them.

Running example of the page: b=8, s=2048, h=4096, a=32, T=S=4, 16-bit activations, Ψ = 7e9, D = 8.
Formulas: ring all-reduce 2(N-1)/N·M, Ulysses 4(S-1)/S·bsh/S per layer (Chapter 1), activations
per layer from Korthikanti et al. 2022, Table 2; GPipe bubble (P-1)/(m+P-1). The numbers reach the
page through glue; here they are recomputed from the formulas, independently of the helper.
"""

from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
from helpers.chapters.ch01_mask_trap import mask_trap_facts  # noqa: E402
from helpers.chapters.ch01_numbers import rows, running_example  # noqa: E402
from helpers.cost.comm import bus_factor  # noqa: E402
from helpers.figures.ring_allreduce import ring_allreduce, ring_figure  # noqa: E402
from helpers.parallel.pp import bubble_fraction, split_layers  # noqa: E402

PAGE = (Path(__file__).resolve().parent.parent / "book" / "01_dimensions.md").read_text()
b, s, h, a, T, S = 8, 2048, 4096, 32, 4, 4
BYTES = 2  # 16-bit activations
sbh = s * b * h


@pytest.mark.parametrize(
    "key, value",
    [
        ("ch01-dp-gb", 2 * 7 / 8 * 14),
        ("ch01-dp-gb-64", 2 * 63 / 64 * 14),
        ("ch01-act-mb", sbh * BYTES / 1e6),
        ("ch01-tp-allreduce-mb", 2 * (T - 1) / T * sbh * BYTES / 1e6),
        ("ch01-tp-layer-mb", 4 * 2 * (T - 1) / T * sbh * BYTES / 1e6),
        ("ch01-ulysses-mb", 4 * (S - 1) / S * sbh / S * BYTES / 1e6),
        ("ch01-megatron-sp-mb", 4 * (T - 1) / T * sbh * BYTES / 1e6),
        ("ch01-act-none-gb", sbh * (34 + 5 * a * s / h) / 1e9),
        ("ch01-act-tp-gb", sbh * (10 + 24 / T + 5 * a * s / (h * T)) / 1e9),
        ("ch01-act-tp-sp-gb", sbh / T * (34 + 5 * a * s / h) / 1e9),
        ("ch01-act-flash-gb", sbh / T * 34 / 1e9),
        ("ch01-bubble-m8-pct", 100 * 3 / 11),
    ],
)
def test_running_example_is_the_formula_and_the_page_glues_it(key, value):
    assert running_example()[key] == pytest.approx(value, rel=1e-12)
    assert f"01_dimensions.ipynb::{key}:" in PAGE, f"the page no longer glues {key}"


def test_every_running_example_number_has_a_row():
    numbers = running_example()
    assert len(rows(numbers)) == len(numbers)


def test_pipeline_answers():
    assert [len(st) for st in split_layers(40, 4)] == [10, 10, 10, 10]
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert min(m for m in range(1, 100) if bubble_fraction(4, m) < 0.1) == 28
    assert "m \\ge 28" in PAGE and "3/11" in PAGE


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_ring_allreduce_is_a_reduce_scatter_then_an_all_gather(n):
    ring = ring_allreduce(n)
    half = [st for st in ring["steps"] if st["phase"] == "reduce-scatter"]
    assert len(half) == n - 1
    after_rs = half[-1]["held"]  # rank r holds chunk r + 1 complete, the others partly
    assert [[len(w) == n for w in row] for row in after_rs] == [
        [c == (r + 1) % n for c in range(n)] for r in range(n)
    ]
    assert all(len(w) == n for row in ring["steps"][-1]["held"] for w in row)
    assert abs(ring["values"] - ring["expected"]).max() < 1e-12
    assert all(sent / n == pytest.approx(bus_factor("all_reduce", n)) for sent in ring["sent"])
    assert "Exercise 9.** Rank $i$ ends the reduce-scatter with chunk $i + 1$" in PAGE


def test_ring_figure_draws_and_a_ring_needs_two_ranks():
    fig = ring_figure(4)
    assert len(fig.axes) == 8  # start, 3 + 3 steps, the byte count
    matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="at least 2 ranks"):
        ring_allreduce(1)


def _mask_runs(s=4):
    """Made-up mask-demo results and a recorded run that show everything Chapter 1 says."""
    results = [
        {"part": "mask", "attn": "sdpa", "seq": s, "mask": None, "later_share": 0.5,
         "next_share": 1 / s},
        {"part": "mask", "attn": "eager", "seq": s, "mask": [8, 1, s, s],
         "blocked": 8 * s * (s - 1) // 2, "later_share": 0.0},
        {"part": "replay", "attn": "sdpa", "losses": [4.9, 4.8]},
        {"part": "replay", "attn": "eager", "losses": [4.9, 4.7]},
        {"part": "small", "attn": "sdpa", "losses": [1.0, 0.01], "causal_mask": 4.0},
        {"part": "small", "attn": "eager", "losses": [1.0, 0.8], "causal_mask": 1.0},
    ]  # fmt: skip
    runs = [{"attn": "sdpa", "losses": [4.9, 4.85, 4.85], "reference": [4.9, 4.7, 4.5]}]
    return results, runs


def test_the_mask_trap_facts_are_read_not_judged():
    results, runs = _mask_runs()
    facts = mask_trap_facts(results, runs)
    assert facts["eager_mask"] == (8, 1, 4, 4) and facts["sdpa_mask"] is None
    assert facts["blocked"] == 48 and facts["replayed_steps"] == 2
    assert facts["replay_gap"] == pytest.approx(0.05)  # 4.8 replayed against 4.85 recorded
    assert (facts["trap_first"], facts["trap_last"], facts["reference_last"]) == (4.9, 4.85, 4.5)
    assert facts["small_free"] == 0.01 and facts["small_free_causal"] == 4.0
    results[4]["causal_mask"] = 0.5  # a fact that contradicts the page is reported all the same
    assert mask_trap_facts(results, runs)["small_free_causal"] == 0.5
