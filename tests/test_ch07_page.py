"""The numbers Chapter 7's page quotes are recomputed here from the functions that produce them."""

from pathlib import Path

import pytest

from helpers.cost import memory
from helpers.config.layout import CH07_SHAPE
from helpers.cost.chunks import gemini_chunks, parameter_sizes
from helpers.cost.memory_llama import layer_activation_bytes

PAGE = (Path(__file__).resolve().parent.parent / "book" / "07_memory.md").read_text()
NUMBER_WORDS = {13: "Thirteen", 16: "Sixteen"}
MIB, GIB = 2**20, 2**30
SHAPE = CH07_SHAPE
N = 4 * 1024  # tokens of one micro-batch
H = SHAPE.hidden


def per_token_h(e, attn="sdpa", seq=1024, tokens=N):
    return layer_activation_bytes(SHAPE, tokens, seq, e, attn=attn) / tokens / H


@pytest.mark.parametrize(
    "label, value, text",
    [
        ("seed, one replica", memory.seed_estimate_memory(7, 1, 1), "112"),
        ("seed, T=4 P=2", memory.seed_estimate_memory(7, 4, 2), "14"),
        ("12Nv in GiB", 12 * N * SHAPE.vocab / GIB, "1.46"),
        ("bf16 layer, h per token", per_token_h(2), "48"),
        ("fp32 layer, h per token", per_token_h(4), "87"),
        ("eager layer, h per token", per_token_h(2, "eager"), "142"),
        (
            "eager core, h per token",
            (per_token_h(2, "eager") - per_token_h(2)) + 2 + 4 * 16 / H,
            "96",
        ),
        (
            "exercise 1, ZeRO-1 D=8",
            sum(memory.model_states(7e9, "bf16", 1, dp=8, tp=4, pp=2)) / 1e9,
            "4.8",
        ),
        ("exercise 2, MiB per layer", layer_activation_bytes(SHAPE, N, 1024, 2) / MIB, "190"),
        ("exercise 2, 12Nv MiB", 12 * N * SHAPE.vocab / MIB, "1500"),
        (
            "exercise 2, layers",
            12 * N * SHAPE.vocab / layer_activation_bytes(SHAPE, N, 1024, 2),
            "7.9",
        ),
        ("exercise 3, GiB more", 12 * N * 96_000 / GIB, "4.4"),
        ("exercise 6, eager core GiB", 6 * 4 * 16 * 4096**2 / GIB, "6"),
        ("Gemini chunk, M elements", gemini_chunks(SHAPE, 2)[0] / 1e6, "50.6"),
        (
            "Gemini padding %",
            100
            * (
                gemini_chunks(SHAPE, 2)[0]
                * gemini_chunks(SHAPE, 2)[1]
                / sum(parameter_sizes(SHAPE))
                - 1
            ),
            "9.7",
        ),
    ],
)
def test_quoted_number_is_the_function(label, value, text):
    digits = len(text.split(".")[1]) if "." in text else 0
    assert f"{value:.{digits}f}" == text, f"{label}: the code gives {value}, the page says {text}"
    assert text in PAGE, f"{label}: {text} no longer appears on the page"


def test_exercise_six_ratio_and_chunk_count():
    rest = per_token_h(2, "eager", seq=4096, tokens=4 * 4096) * H * 4 * 4096 - 6 * 4 * 16 * 4096**2
    assert 7.5 < 6 * 4 * 16 * 4096**2 / rest < 9  # "about eight times"
    assert gemini_chunks(SHAPE, 2)[1] == 8 and "8 chunks" in PAGE
    assert "This chapter is an outline" not in PAGE


def _measured():
    from helpers.record.ch07_tables import measured_rows
    from helpers.record.results import load

    try:
        return {r["layout"]: r for r in measured_rows(load("ch07_memory", gpus=2))}
    except FileNotFoundError:
        return None


@pytest.mark.skipif(_measured() is None, reason="no recorded GPU result")
def test_measured_numbers_on_the_page_come_from_the_record():
    m = _measured()
    base = m["DDP fp32"]
    ratio = lambda name, key: m[name][key] / base[key]  # noqa: E731
    quoted = [
        (len(m), "Sixteen"),
        (max(abs(r["error_pct"]) for r in m.values()), "1.9"),
        (m["Gemini bf16 (static)"]["measured"] / GIB, "8.7"),
        (ratio("Gemini bf16 (static)", "tokens_per_s"), "0.37"),
        (m["Gemini bf16 + offload"]["measured"] / GIB, "6.5"),
        (ratio("Gemini bf16 + offload", "measured"), "0.43"),
        (ratio("Gemini bf16 + offload", "tokens_per_s"), "0.05"),
        (m["Gemini bf16 (auto)"]["measured"] / GIB, "6.8"),
        (ratio("DDP bf16 (Hybrid tp=1)", "measured"), "0.78"),
        (ratio("DDP bf16 (Hybrid tp=1)", "tokens_per_s"), "1.32"),
        (ratio("ZeRO-1 bf16", "measured"), "0.59"),
        (ratio("ZeRO-1 bf16", "tokens_per_s"), "0.67"),
        (ratio("ZeRO-1 bf16 + recompute", "measured"), "0.30"),
        (ratio("ZeRO-2 bf16 + CPU offload", "measured"), "0.45"),
        (ratio("ZeRO-2 bf16 + CPU offload", "tokens_per_s"), "0.09"),
        (m["ZeRO-1 bf16 + recompute"]["tokens_per_s"] / m["ZeRO-1 bf16"]["tokens_per_s"], "0.78"),
        (m["ZeRO-2 bf16 + CPU offload"]["tokens_per_s"] / m["ZeRO-2 bf16"]["tokens_per_s"], "0.13"),
        (
            (m["ZeRO-2 bf16, eager attention"]["measured"] - m["ZeRO-2 bf16"]["measured"]) / GIB,
            "8.8",
        ),
        ((m["ZeRO-2 bf16, micro-batch 8"]["measured"] - m["ZeRO-2 bf16"]["measured"]) / GIB, "6"),
        (
            100
            * (
                m["ZeRO-2 bf16, micro-batch 8"]["tokens_per_s"] / m["ZeRO-2 bf16"]["tokens_per_s"]
                - 1
            ),
            "69",
        ),
    ]
    for value, text in quoted:
        if isinstance(value, int):
            assert text == NUMBER_WORDS[value] and text in PAGE
            continue
        digits = len(text.split(".")[1]) if "." in text else 0
        assert f"{value:.{digits}f}" == text, (value, text)
        assert text in PAGE, text
    outside = [r["outside_allocator"] / GIB for r in m.values()]
    assert f"{min(outside):.1f}–{max(outside):.1f} GiB" in PAGE
