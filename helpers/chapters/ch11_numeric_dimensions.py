"""Chapter 11's numeric questions on Chapters 1 and 2: the four dimensions and combining them.

Numeric questions of Chapter 11, each computed by the helper the book uses for it; see
:mod:`helpers.chapters.ch11_interview` for the record type. ``stored`` is the answer key;
``tests/test_quiz.py`` checks it against ``reference`` (so a change to a helper that moves an
answer is caught). Units: GB = 1e9 bytes, as in the papers and the seed; MB = 1e6 bytes.
"""

from __future__ import annotations

from functools import partial

from helpers.cost.comm import (
    bytes_sent,
    ops_bytes_sent,
    tp_layer_ops,
    ulysses_layer_ops,
    zero_step_volume,
)
from helpers.cost.activations import layer_activations
from helpers.parallel.layouts import data_degree, factor_parallelism
from helpers.parallel.mesh import RankMesh
from helpers.parallel.pp import bubble_fraction
from helpers.chapters.ch11_interview import Question

N = partial(Question, fmt="{:.4g}")
GB, MB = 1e9, 1e6

QUESTIONS = [
    # --- Chapter 1: the four dimensions
    N(
        "c1-allreduce-bytes",
        "01_dimensions",
        "basic",
        "A ring all-reduce of a 1 GB gradient buffer over 8 GPUs: how many GB does each GPU send?",
        "2(N−1)/N · S = 2·7/8 · 1 GB = {value}: a reduce-scatter and an all-gather, each (N−1)/N "
        "· S.",
        "A contractor with an order for a 100-storey villa",
        lambda: bytes_sent("all_reduce", 1 * GB, 8) / GB,
        1.75,
        "GB",
    ),
    N(
        "c1-bubble-4-4",
        "01_dimensions",
        "basic",
        "A GPipe/1F1B pipeline of 4 stages runs 4 micro-batches. What fraction of the step does "
        "each stage idle?",
        "(p−1)/(m+p−1) = 3/7 = {value}: each stage waits p−1 slots of the m+p−1.",
        "Micro-batches and the bubble",
        lambda: bubble_fraction(4, 4),
        0.4286,
    ),
    N(
        "c1-bubble-8-32",
        "01_dimensions",
        "intermediate",
        "8 pipeline stages, 32 micro-batches: the bubble fraction?",
        "(8−1)/(32+8−1) = 7/39 = {value}. Micro-batches ≥ 4·p keep it under about 20 %.",
        "Micro-batches and the bubble",
        lambda: bubble_fraction(8, 32),
        0.1795,
    ),
    N(
        "c1-bubble-interleaved",
        "01_dimensions",
        "advanced",
        "Interleaved 1F1B, 4 stages, 8 micro-batches, 2 model chunks per stage: the idle share of "
        "the step?",
        "β = (p−1)/(v·m) = 3/16 relative to the ideal time, a share β/(1+β) = 3/19 = {value} of "
        "the step (Narayanan et al. 2021); without interleaving it is 3/11.",
        "Micro-batches and the bubble",
        lambda: bubble_fraction(4, 8, chunks=2),
        0.1579,
    ),
    N(
        "c1-tp-bytes",
        "01_dimensions",
        "intermediate",
        "Megatron tensor parallelism, T = 4, b = 1, s = 2048, h = 4096 in bf16: MB each GPU sends "
        "per layer (forward and backward)?",
        "4 all-reduces of b·s·h·2 B = 16.8 MB, each 2(T−1)/T of it: 4 · 1.5 · 16.8 MB = {value}.",
        "Tensor parallelism",
        lambda: ops_bytes_sent(tp_layer_ops(1, 2048, 4096), 4) / MB,
        100.7,
        "MB",
    ),
    N(
        "c1-ulysses-bytes",
        "01_dimensions",
        "advanced",
        "Ulysses sequence parallelism, P = 4, b = 1, s = 8192, h = 4096 in bf16: MB each GPU "
        "sends per layer (forward and backward)?",
        "8 all-to-alls (Q, K, V, output; forward and backward) of b·(s/P)·h·2 B = 16.8 MB, each "
        "(P−1)/P of it: 8 · 0.75 · 16.8 MB = {value}. It shrinks with P; Megatron SP's volume "
        "does not.",
        "Ulysses: all-to-all across heads",
        lambda: ops_bytes_sent(ulysses_layer_ops(1, 8192, 4096, 4), 4) / MB,
        100.7,
        "MB",
    ),
    N(
        "c1-activations",
        "01_dimensions",
        "intermediate",
        "Activations of one transformer layer, no parallelism or recomputation, 16-bit: s = 2048, "
        "b = 8, h = 4096, a = 32. How many GB?",
        "s·b·h·(34 + 5·a·s/h) bytes (Korthikanti et al. 2022) = 67.1 M · (34 + 80) = {value}.",
        "The four side by side",
        lambda: layer_activations(2048, 8, 4096, 32) / GB,
        7.651,
        "GB",
    ),
    N(
        "c1-activations-tp-sp",
        "01_dimensions",
        "advanced",
        "The same layer with T = 8 tensor parallelism plus Megatron sequence parallelism: GB per "
        "GPU?",
        "(s·b·h/T)·(34 + 5·a·s/h) = 7.65 GB / 8 = {value}: sequence parallelism splits the 34 "
        "part too.",
        "Megatron-style: the regions tensor parallelism leaves replicated",
        lambda: layer_activations(2048, 8, 4096, 32, tp=8, sequence_parallel=True) / GB,
        0.9563,
        "GB",
    ),
    N(
        "c1-ddp-volume",
        "01_dimensions",
        "intermediate",
        "Data parallelism over 8 GPUs, 1 B parameters with bf16 gradients: GB each GPU sends per "
        "step?",
        "One all-reduce of 2 GB of gradients: 2·(N−1)/N · 2 GB = {value}.",
        "Data parallelism",
        lambda: zero_step_volume(1e9, 0, n=8) / GB,
        3.5,
        "GB",
    ),
    # --- Chapter 2: combining
    N(
        "c2-data-degree",
        "02_combining",
        "basic",
        "64 GPUs with T = 4 and P = 2: what is the data-parallel degree D?",
        "D = G/(T·P) = 64/8 = {value}.",
        "One equation before anything else",
        lambda: data_degree(64, 4, 2),
        8,
    ),
    N(
        "c2-data-degree-sp",
        "02_combining",
        "intermediate",
        "128 GPUs, T = 8, P = 4, all_to_all sequence parallelism with S = 2: D?",
        "all_to_all has an own axis, counted in G: D = 128/(8·4·2) = {value}.",
        "Where sequence parallelism fits",
        lambda: data_degree(128, 8, 4, 2, "all_to_all"),
        2,
    ),
    N(
        "c2-data-degree-split-gather",
        "02_combining",
        "intermediate",
        "32 GPUs, T = 4, P = 2, split_gather sequence parallelism: D?",
        "split_gather reuses the tensor group (S = T) and is not counted in G: D = 32/(4·2) = "
        "{value}.",
        "Where sequence parallelism fits",
        lambda: data_degree(32, 4, 2, 1, "split_gather"),
        4,
    ),
    N(
        "c2-rank-of",
        "02_combining",
        "intermediate",
        "Colossal-AI's mesh (dp, pp, tp), each of size 2: the global rank of dp = 1, pp = 1, tp = "
        "1?",
        "rank = (dp·P + pp)·T + tp = (1·2 + 1)·2 + 1 = {value}; tp is the fastest axis.",
        "The rank grid",
        lambda: RankMesh(2, 2, 2).rank_of(dp=1, pp=1, tp=1),
        7,
    ),
    N(
        "c2-tp-groups",
        "02_combining",
        "basic",
        "64 GPUs with T = 8, P = 2: how many tensor-parallel groups are there?",
        "Every group has T ranks and the groups partition the world: 64/8 = {value}.",
        "The rank grid",
        lambda: len(RankMesh.for_world(64, pp=2, tp=8).groups("tp")),
        8,
    ),
    N(
        "c2-seed-combos",
        "02_combining",
        "basic",
        "How many (D, T, P) combinations does the seed's factor_parallelism list for 32 GPUs (T ≤ "
        "8, P ≤ 4)?",
        "Every T in 1..8 and P in 1..4 with T·P dividing 32: {value}, none checked against the "
        "model.",
        "What the seed's enumeration forgets",
        lambda: len(factor_parallelism(32)),
        12,
    ),
]
