"""Chapter 11's numeric interview questions, each computed by the helper the book uses for it.

See :mod:`helpers.chapters.ch11_interview` for the record type. ``stored`` is the answer key; ``tests/test_quiz.py``
checks it against ``reference`` (so a change to a helper that moves an answer is caught). Units:
GB = 1e9 bytes, as in the papers and the seed; MB = 1e6 bytes.
"""

from __future__ import annotations

from functools import partial

from helpers.cost.comm import NOMINAL_LINKS, bytes_sent, collective_time, comm_share, ops_bytes_sent, tp_layer_ops, \
    ulysses_layer_ops, zero_step_volume
from helpers.parallel.layouts import data_degree, factor_parallelism
from helpers.cost.memory import layer_activations, model_states, seed_estimate_memory
from helpers.parallel.mesh import RankMesh
from helpers.cost.mfu import flops_per_token, mfu
from helpers.parallel.ep import expert_capacity
from helpers.parallel.pp import bubble_fraction
from helpers.chapters.ch11_interview import Question

N = partial(Question, fmt="{:.4g}")
GB, MB = 1e9, 1e6

NUMERIC = [
    # --- Chapter 1: the four dimensions
    N("c1-allreduce-bytes", "01_dimensions", "basic",
      "A ring all-reduce of a 1 GB gradient buffer over 8 GPUs: how many GB does each GPU send?",
      "2(N−1)/N · S = 2·7/8 · 1 GB = {value}: a reduce-scatter and an all-gather, each (N−1)/N · S.",
      "A contractor with an order for a 100-storey villa",
      lambda: bytes_sent("all_reduce", 1 * GB, 8) / GB, 1.75, "GB"),
    N("c1-bubble-4-4", "01_dimensions", "basic",
      "A GPipe/1F1B pipeline of 4 stages runs 4 micro-batches. What fraction of the step does each stage idle?",
      "(p−1)/(m+p−1) = 3/7 = {value}: each stage waits p−1 slots of the m+p−1.",
      "Micro-batches and the bubble", lambda: bubble_fraction(4, 4), 0.4286),
    N("c1-bubble-8-32", "01_dimensions", "intermediate",
      "8 pipeline stages, 32 micro-batches: the bubble fraction?",
      "(8−1)/(32+8−1) = 7/39 = {value}. Micro-batches ≥ 4·p keep it under about 20 %.",
      "Micro-batches and the bubble", lambda: bubble_fraction(8, 32), 0.1795),
    N("c1-bubble-interleaved", "01_dimensions", "advanced",
      "Interleaved 1F1B, 4 stages, 8 micro-batches, 2 model chunks per stage: the idle share of the step?",
      "β = (p−1)/(v·m) = 3/16 relative to the ideal time, a share β/(1+β) = 3/19 = {value} of the step "
      "(Narayanan et al. 2021); without interleaving it is 3/11.",
      "Micro-batches and the bubble", lambda: bubble_fraction(4, 8, chunks=2), 0.1579),
    N("c1-tp-bytes", "01_dimensions", "intermediate",
      "Megatron tensor parallelism, T = 4, b = 1, s = 2048, h = 4096 in bf16: MB each GPU sends per layer "
      "(forward and backward)?",
      "4 all-reduces of b·s·h·2 B = 16.8 MB, each 2(T−1)/T of it: 4 · 1.5 · 16.8 MB = {value}.",
      "Tensor parallelism", lambda: ops_bytes_sent(tp_layer_ops(1, 2048, 4096), 4) / MB, 100.7, "MB"),
    N("c1-ulysses-bytes", "01_dimensions", "advanced",
      "Ulysses sequence parallelism, P = 4, b = 1, s = 8192, h = 4096 in bf16: MB each GPU sends per layer "
      "(forward and backward)?",
      "8 all-to-alls (Q, K, V, output; forward and backward) of b·(s/P)·h·2 B = 16.8 MB, each (P−1)/P of it: "
      "8 · 0.75 · 16.8 MB = {value}. It shrinks with P; Megatron SP's volume does not.",
      "Ulysses: all-to-all across heads",
      lambda: ops_bytes_sent(ulysses_layer_ops(1, 8192, 4096, 4), 4) / MB, 100.7, "MB"),
    N("c1-activations", "01_dimensions", "intermediate",
      "Activations of one transformer layer, no parallelism or recomputation, 16-bit: s = 2048, b = 8, "
      "h = 4096, a = 32. How many GB?",
      "s·b·h·(34 + 5·a·s/h) bytes (Korthikanti et al. 2022) = 67.1 M · (34 + 80) = {value}.",
      "The four side by side", lambda: layer_activations(2048, 8, 4096, 32) / GB, 7.651, "GB"),
    N("c1-activations-tp-sp", "01_dimensions", "advanced",
      "The same layer with T = 8 tensor parallelism plus Megatron sequence parallelism: GB per GPU?",
      "(s·b·h/T)·(34 + 5·a·s/h) = 7.65 GB / 8 = {value}: sequence parallelism splits the 34 part too.",
      "Megatron-style: the regions tensor parallelism leaves replicated",
      lambda: layer_activations(2048, 8, 4096, 32, tp=8, sequence_parallel=True) / GB, 0.9563, "GB"),
    N("c1-ddp-volume", "01_dimensions", "intermediate",
      "Data parallelism over 8 GPUs, 1 B parameters with bf16 gradients: GB each GPU sends per step?",
      "One all-reduce of 2 GB of gradients: 2·(N−1)/N · 2 GB = {value}.",
      "Data parallelism", lambda: zero_step_volume(1e9, 0, n=8) / GB, 3.5, "GB"),
    # --- Chapter 2: combining
    N("c2-data-degree", "02_combining", "basic",
      "64 GPUs with T = 4 and P = 2: what is the data-parallel degree D?",
      "D = G/(T·P) = 64/8 = {value}.", "One equation before anything else",
      lambda: data_degree(64, 4, 2), 8),
    N("c2-data-degree-sp", "02_combining", "intermediate",
      "128 GPUs, T = 8, P = 4, all_to_all sequence parallelism with S = 2: D?",
      "all_to_all has an own axis, counted in G: D = 128/(8·4·2) = {value}.", "Where sequence parallelism fits",
      lambda: data_degree(128, 8, 4, 2, "all_to_all"), 2),
    N("c2-data-degree-split-gather", "02_combining", "intermediate",
      "32 GPUs, T = 4, P = 2, split_gather sequence parallelism: D?",
      "split_gather reuses the tensor group (S = T) and is not counted in G: D = 32/(4·2) = {value}.",
      "Where sequence parallelism fits", lambda: data_degree(32, 4, 2, 1, "split_gather"), 4),
    N("c2-rank-of", "02_combining", "intermediate",
      "Colossal-AI's mesh (dp, pp, tp), each of size 2: the global rank of dp = 1, pp = 1, tp = 1?",
      "rank = (dp·P + pp)·T + tp = (1·2 + 1)·2 + 1 = {value}; tp is the fastest axis.", "The rank grid",
      lambda: RankMesh(2, 2, 2).rank_of(dp=1, pp=1, tp=1), 7),
    N("c2-tp-groups", "02_combining", "basic",
      "64 GPUs with T = 8, P = 2: how many tensor-parallel groups are there?",
      "Every group has T ranks and the groups partition the world: 64/8 = {value}.", "The rank grid",
      lambda: len(RankMesh.for_world(64, pp=2, tp=8).groups("tp")), 8),
    N("c2-seed-combos", "02_combining", "basic",
      "How many (D, T, P) combinations does the seed's factor_parallelism list for 32 GPUs (T ≤ 8, P ≤ 4)?",
      "Every T in 1..8 and P in 1..4 with T·P dividing 32: {value}, none checked against the model.",
      "What the seed's enumeration forgets", lambda: len(factor_parallelism(32)), 12),
    # --- Chapter 3: strategy
    N("c3-comm-share", "03_strategy", "basic",
      "A step spends 30 ms communicating (not overlapped) and 50 ms computing. The communication share?",
      "t_comm/(t_comm + t_compute) = 30/80 = {value}: below the seed's 0.5 alarm.",
      "Step 3: is communication the bottleneck? The 0.5 rule, measured", lambda: comm_share(0.030, 0.050)[0], 0.375),
    N("c3-allreduce-nvlink", "03_strategy", "intermediate",
      "Nominal NVLink 4 (450 GB/s per direction, 5 µs): ms for an all-reduce of 1 GB over 8 GPUs?",
      "α + 2(N−1)/N·S/β = 5 µs + 1.75 GB / 450 GB/s = {value}.",
      "Step 2: the hardware — what a collective costs on each link",
      lambda: collective_time("all_reduce", 1 * GB, 8, NOMINAL_LINKS["nvlink4"]) * 1e3, 3.894, "ms"),
    N("c3-allreduce-ib", "03_strategy", "intermediate",
      "The same all-reduce over InfiniBand NDR (50 GB/s per direction, 10 µs): ms?",
      "10 µs + 1.75 GB / 50 GB/s = {value}: nine times NVLink, why tensor parallelism stays in a node.",
      "Step 2: the hardware — what a collective costs on each link",
      lambda: collective_time("all_reduce", 1 * GB, 8, NOMINAL_LINKS["ib_ndr"]) * 1e3, 35.01, "ms"),
    N("c3-zero3-volume", "03_strategy", "advanced",
      "ZeRO-3 on 7.5 B parameters in bf16 (large N): GB each GPU sends per step?",
      "3Ψ elements (all-gather forward, all-gather backward, reduce-scatter gradients) · 2 B = {value}; "
      "DDP and ZeRO-1/2 send 2Ψ.", "Step 2: the hardware — what a collective costs on each link",
      lambda: zero_step_volume(7.5e9, 3) / GB, 45, "GB"),
    # --- Chapter 7: memory
    N("c7-replica", "07_memory", "basic",
      "Mixed-precision Adam: GB for one full replica of a 7 B model's states?",
      "16 B per parameter (2 weights + 2 gradients + 12 fp32 master, m, v) · 7 B = {value}.",
      "Where memory goes: the seed's 16 bytes", lambda: seed_estimate_memory(7, 1, 1), 112, "GB"),
    N("c7-seed-14", "07_memory", "basic",
      "The seed's estimate_memory for 7 B parameters with T = 4, P = 2: GB per GPU?",
      "16 B · 7 B / (T·P) = {value} — model states only: no activations, no ZeRO, no context.",
      "Where memory goes: the seed's 16 bytes", lambda: seed_estimate_memory(7, 4, 2), 14, "GB"),
    N("c7-zero1", "07_memory", "intermediate",
      "ZeRO-1, Ψ = 7.5 B, N_d = 64: GB of model states per GPU?",
      "4Ψ + 12Ψ/N_d = 30 + 1.41 = {value} (ZeRO paper, Fig. 1).", "Where memory goes: the seed's 16 bytes",
      lambda: sum(model_states(7.5e9, "bf16", 1, dp=64)) / GB, 31.41, "GB"),
    N("c7-zero2", "07_memory", "intermediate",
      "ZeRO-2, Ψ = 7.5 B, N_d = 64: GB per GPU?",
      "2Ψ + 14Ψ/N_d = 15 + 1.64 = {value}.", "Where memory goes: the seed's 16 bytes",
      lambda: sum(model_states(7.5e9, "bf16", 2, dp=64)) / GB, 16.64, "GB"),
    N("c7-zero3", "07_memory", "intermediate",
      "ZeRO-3, Ψ = 7.5 B, N_d = 64: GB per GPU?",
      "16Ψ/N_d = 120/64 = {value}.", "Where memory goes: the seed's 16 bytes",
      lambda: sum(model_states(7.5e9, "bf16", 3, dp=64)) / GB, 1.875, "GB"),
    N("c7-hybrid-states", "07_memory", "advanced",
      "7 B parameters, T = 4, P = 2, D = 8, ZeRO-1, bf16: GB of model states per GPU?",
      "Ψ/(T·P) = 875 M per GPU; 4 B of it in weights and gradients, 12 B/D in optimizer states: "
      "3.5 + 1.31 = {value}.", "Where memory goes: the seed's 16 bytes",
      lambda: sum(model_states(7e9, "bf16", 1, dp=8, tp=4, pp=2)) / GB, 4.812, "GB"),
    N("c7-recompute", "07_memory", "intermediate",
      "Full activation recomputation, s = 4096, b = 1, h = 4096, 16-bit: MB kept per layer?",
      "Only the layer input, 2·s·b·h = {value}.", "Activations of a Llama layer, counted",
      lambda: layer_activations(4096, 1, 4096, 32, recompute=True) / MB, 33.55, "MB"),
    # --- Chapter 9: demos (MFU, MoE)
    N("c9-flops-token", "09_quick_demos", "basic",
      "Training FLOPs per token of a 7 B model, ignoring attention: how many GFLOP?",
      "6Ψ = 2Ψ forward + 4Ψ backward = {value}.", "Hybrid parallelism: a Llama under HybridParallelPlugin",
      lambda: flops_per_token(7e9) / 1e9, 42, "GFLOP"),
    N("c9-flops-attention", "09_quick_demos", "intermediate",
      "The same with attention: Ψ = 7 B, L = 32, h = 4096, s = 4096. GFLOP per token?",
      "6Ψ + 12·L·h·s = 42 + 6.44 = {value}.", "Hybrid parallelism: a Llama under HybridParallelPlugin",
      lambda: flops_per_token(7e9, 32, 4096, 4096) / 1e9, 48.44, "GFLOP"),
    N("c9-mfu", "09_quick_demos", "intermediate",
      "8 H200s (989.5 TFLOP/s bf16 each) train a 7 B model at 24,000 tokens/s in total. MFU, ignoring attention?",
      "24,000 · 42 GFLOP / (8 · 989.5 TFLOP/s) = {value}.", "Hybrid parallelism: a Llama under HybridParallelPlugin",
      lambda: mfu(24_000, flops_per_token(7e9), 8), 0.1273),
    N("c9-hfu-ratio", "09_quick_demos", "advanced",
      "With full recomputation, by what factor does hardware-FLOPs utilisation exceed MFU?",
      "The forward runs twice: 8Ψ instead of 6Ψ per token, a factor {value}; MFU does not count it.",
      "Hybrid parallelism: a Llama under HybridParallelPlugin",
      lambda: flops_per_token(7e9, recompute=True) / flops_per_token(7e9), 1.333),
    N("c9-moe-capacity", "09_quick_demos", "intermediate",
      "MoE routing: 4096 tokens, 8 experts, top-2, capacity factor 1.25. Slots per expert?",
      "C = ⌈capacity factor · k · T / E⌉ = ⌈1.25 · 2 · 4096 / 8⌉ = {value}; tokens beyond it are dropped.",
      "A MoE layer from scratch", lambda: expert_capacity(4096, 8, 2, 1.25), 1280),
]
