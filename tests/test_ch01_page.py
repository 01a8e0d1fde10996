"""The numbers Chapter 1's page quotes are recomputed here from the formulas they come from.

Running example of the page: b=8, s=2048, h=4096, a=32, T=S=4, 16-bit activations, Ψ = 7e9.
Formulas: ring all-reduce 2(N-1)/N·S, Ulysses 4(S-1)/S·bsh/S per layer (Chapter 1),
activations per layer from Korthikanti et al. 2022, Table 2; GPipe bubble (p-1)/(m+p-1).
"""

from pathlib import Path

import pytest

from helpers.parallel.pp import bubble_fraction, split_layers

PAGE = (Path(__file__).resolve().parent.parent / "book" / "01_dimensions.md").read_text()
b, s, h, a, T, S = 8, 2048, 4096, 32, 4, 4
BYTES = 2  # 16-bit activations
sbh = s * b * h


@pytest.mark.parametrize(
    "label, value, text",
    [
        ("DP all-reduce, 7B, D=8", 2 * 7 / 8 * 14, "24.5"),
        ("DP all-reduce, 7B, D=64", 2 * 63 / 64 * 14, "27.6"),
        ("activation tensor bsh", sbh * BYTES / 1e6, "134"),
        ("TP all-reduce of bsh, T=4", 2 * (T - 1) / T * sbh * BYTES / 1e6, "201"),
        ("TP per layer, 4 all-reduces", 4 * 2 * (T - 1) / T * sbh * BYTES / 1e6, "805"),
        ("Ulysses per layer forward", 4 * (S - 1) / S * sbh / S * BYTES / 1e6, "101"),
        ("Megatron-SP per layer forward", 4 * (T - 1) / T * sbh * BYTES / 1e6, "403"),
        ("activations, no parallelism", sbh * (34 + 5 * a * s / h) / 1e9, "7.65"),
        ("activations, TP", sbh * (10 + 24 / T + 5 * a * s / (h * T)) / 1e9, "2.42"),
        ("activations, TP+SP", sbh / T * (34 + 5 * a * s / h) / 1e9, "1.91"),
        ("activations, TP+SP, flash attention", sbh / T * 34 / 1e9, "0.57"),
    ],
)
def test_quoted_number_is_the_formula(label, value, text):
    digits = len(text.split(".")[1]) if "." in text else 0
    assert f"{value:.{digits}f}" == text, f"{label}: formula gives {value}, page says {text}"
    assert text in PAGE, f"{label}: {text} no longer appears on the page"


def test_pipeline_answers():
    assert [len(st) for st in split_layers(40, 4)] == [10, 10, 10, 10]
    assert bubble_fraction(4, 8) == pytest.approx(3 / 11)
    assert min(m for m in range(1, 100) if bubble_fraction(4, m) < 0.1) == 28
    assert "m \\ge 28" in PAGE and "3/11" in PAGE


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
    runs = [{"attn": "sdpa", "losses": [4.9, 4.8, 4.85], "reference": [4.9, 4.7, 4.5]}]
    return results, runs


def test_the_mask_trap_lines_hold_what_the_page_says_and_name_what_does_not():
    import pytest

    from helpers.chapters.ch01_mask_trap import mask_trap_lines

    results, runs = _mask_runs()
    assert mask_trap_lines(results, runs)[0].startswith("mask handed to the first layer: eager")
    results[4]["causal_mask"] = 2.0  # the smaller model no longer fails under a causal mask
    with pytest.raises(ValueError, match="fails under a causal mask"):
        mask_trap_lines(results, runs)
