"""Chapter 11's questions on context parallelism (Chapter 9, "Context parallelism: ring attention").

Numeric questions carry ``reference``, computed with :mod:`helpers.parallel.cp` (the ring's
bytes, work per step and overlap threshold) and :mod:`helpers.chapters.ch09_context_parallel`
(Ulysses' bytes from :mod:`helpers.cost.comm`); see :mod:`helpers.chapters.ch11_interview` for
the record type. Units: MB = 1e6 bytes.
"""

from __future__ import annotations

from functools import partial

from helpers.chapters.ch11_interview import Question
from helpers.cost.comm import NOMINAL_LINKS
from helpers.cost.mfu import H200_BF16_PEAK
from helpers.parallel.cp import critical_path, overlap_tokens, ring_bytes, step_work

CHAPTER = "09_quick_demos"
N = partial(Question, fmt="{:.4g}")
MB = 1e6


def _ulysses_mb(b, s, h, ranks):
    from helpers.chapters.ch09_context_parallel import ulysses_bytes

    return ulysses_bytes(b, s, h, ranks, 2) / MB


QUESTIONS = [
    N(
        "c9-ring-bytes",
        CHAPTER,
        "intermediate",
        "Ring attention over S = 8 ranks, b = 1, s = 131,072, h = 2048 (no grouped-query "
        "attention), bf16: how many MB does each rank send in one layer's forward pass?",
        "K and V of b·(s/S)·h elements each, passed on S−1 times: 2·7·16,384·2048·2 bytes = "
        "{value}. It hardly shrinks with S: about 2·b·s·h·e whatever the degree.",
        "Bytes against Ulysses",
        lambda: ring_bytes(1, 131_072, 2048, 8, 2) / MB,
        939.5,
        "MB",
    ),
    N(
        "c9-ring-vs-ulysses",
        CHAPTER,
        "advanced",
        "Same layer, same S = 8: how many times more bytes per rank does ring attention send "
        "than Ulysses in the forward pass?",
        "Ring 2(S−1)/S·bsh·e, Ulysses 4(S−1)/S·bsh·e/S (four all-to-alls of bsh/S): the ratio is "
        "S/2 = {value}. Ulysses' volume falls as 1/S, the ring's does not.",
        "Bytes against Ulysses",
        lambda: ring_bytes(1, 131_072, 2048, 8, 2) / MB / _ulysses_mb(1, 131_072, 2048, 8),
        4.0,
    ),
    N(
        "c9-zigzag-critical-path",
        CHAPTER,
        "intermediate",
        "Causal ring attention on S = 8 ranks, the sequence cut into 16 chunks. Counting chunk "
        "pairs on the critical path (each ring step waits for its slowest rank), how much longer "
        "is the contiguous layout than zigzag?",
        "Contiguous: 3 pairs at step 0, then the last rank computes 4 every step: 3 + 4·7 = 31. "
        "Zigzag: 3, then 2 on every rank every step: 3 + 2·7 = 17. Ratio 31/17 = {value}.",
        "Causal attention and the zigzag layout",
        lambda: critical_path(step_work(8, "contiguous")) / critical_path(step_work(8, "zigzag")),
        1.824,
    ),
    N(
        "c9-overlap-tokens",
        CHAPTER,
        "advanced",
        "An H200 at 989.5 TFLOP/s (dense bf16) sends K/V over one 400 Gb/s InfiniBand NIC "
        "(50 GB/s). Causal, zigzag, no grouped-query attention, bf16: at least how many tokens "
        "per rank does a ring step need so that its attention hides the transfer?",
        "A zigzag step computes half of 4·n²·d FLOPs per head and sends 2·n·d·2 bytes per head: "
        "n ≥ 2·F/B = {value}. Over NVLink (450 GB/s) it is 4,398.",
        "What limits each, and when to combine them",
        lambda: overlap_tokens(
            H200_BF16_PEAK, NOMINAL_LINKS["ib_ndr"].bandwidth_bytes_per_s, 2, 1.0, 0.5
        ),
        39_580,
        "tokens",
        fmt="{:,.0f}",
    ),
    Question(
        "c9-ulysses-or-ring",
        CHAPTER,
        "intermediate",
        "A model has 8 key/value heads and must train at 1 M tokens on 64 GPUs (8 per node). "
        "Ulysses, ring attention, or both?",
        "Ulysses alone stops at S = 8 (its all-to-all splits heads; with grouped-query attention "
        "the 8 kv heads bound it). A ring alone of 64 sends ≈ 2·b·s·h·e per layer whatever S, "
        "much of it over InfiniBand, and hides it only with enough tokens per rank. Both: "
        "Ulysses of 8 inside each node over NVLink, a ring of 8 across nodes (the 2-D scheme of "
        "USP, Fang and Zhao 2024). After the all-to-all a ring block holds s/8 = 131,072 tokens, "
        "far above the ≈ 40,000 a step needs to hide its transfer over InfiniBand.",
        "What limits each, and when to combine them",
    ),
    Question(
        "c9-zigzag-why",
        CHAPTER,
        "basic",
        "Why does causal ring attention cut the sequence into 2S chunks and give rank i chunks "
        "i and 2S−1−i?",
        "Under a causal mask a query chunk needs only earlier key chunks. With contiguous blocks "
        "rank 0 computes almost nothing and the last rank almost everything, and every ring step "
        "waits for the busiest rank. Pairing an early chunk with its mirror gives every rank the "
        "same work at every step (two of four chunk pairs), nearly halving the critical path.",
        "Causal attention and the zigzag layout",
    ),
    Question(
        "c9-inner-ring",
        CHAPTER,
        "advanced",
        "What does `inner_ring_size` do in Colossal-AI's `ring_attn`, and what does 0.5.0 "
        "get wrong about it?",
        "It splits the sp ranks into inner rings (meant to sit inside a node) and inter rings "
        "that pass K/V between them in one transfer (LoongTrain's double ring). In 0.5.0 "
        "`get_double_ring_groups` loops over inner_ring_size where it should loop over the "
        "number of rings, so the groups are right only when inner_ring_size² = sp_size; with "
        "sp 8 and inner 2, ranks 4-7 get no inner ring.",
        "The same with Colossal-AI: ring_attn and inner_ring_size",
    ),
]
