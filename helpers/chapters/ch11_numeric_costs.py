"""Chapter 11's numeric questions on Chapters 3, 7 and 9: communication time, memory, FLOPs.

Numeric questions of Chapter 11, each computed by the helper the book uses for it; see
:mod:`helpers.chapters.ch11_interview` for the record type. ``stored`` is the answer key;
``tests/test_quiz.py`` checks it against ``reference`` (so a change to a helper that moves an
answer is caught). Units: GB = 1e9 bytes, as in the papers and the seed; MB = 1e6 bytes.
"""

from __future__ import annotations

from functools import partial

from helpers.cost.comm import NOMINAL_LINKS, collective_time, comm_share, zero_step_volume
from helpers.cost.step_time import Hardware
from helpers.cost.activations import layer_activations
from helpers.cost.memory import model_states, seed_estimate_memory
from helpers.cost.mfu import flops_per_token, mfu
from helpers.parallel.ep import expert_capacity
from helpers.chapters.ch11_interview import Question

N = partial(Question, fmt="{:.4g}")
GB, MB = 1e9, 1e6

QUESTIONS = [
    # --- Chapter 3: strategy
    N(
        "c3-comm-share",
        "03_strategy",
        "basic",
        "A step spends 30 ms communicating (not overlapped) and 50 ms computing. The "
        "communication share?",
        "t_comm/(t_comm + t_compute) = 30/80 = {value}: below the seed's 0.5 alarm.",
        "Step 3: is communication the bottleneck? The 0.5 rule, measured",
        lambda: comm_share(0.030, 0.050)[0],
        0.375,
    ),
    N(
        "c3-allreduce-nvlink",
        "03_strategy",
        "intermediate",
        "Nominal NVLink 4 (450 GB/s per direction, 5 µs): ms for an all-reduce of 1 GB over 8 "
        "GPUs?",
        "α + 2(N−1)/N·S/β = 5 µs + 1.75 GB / 450 GB/s = {value}.",
        "Step 2: the hardware — what a collective costs on each link",
        lambda: collective_time("all_reduce", 1 * GB, 8, NOMINAL_LINKS["nvlink4"]) * 1e3,
        3.894,
        "ms",
    ),
    N(
        "c3-allreduce-ib",
        "03_strategy",
        "intermediate",
        "The same all-reduce with the 8 GPUs on 8 nodes, one each, every node with one InfiniBand "
        "NDR card per GPU (50 GB/s per direction, 10 µs): ms?",
        "Each group has one member per node, so it gets one card: 10 µs + 1.75 GB / 50 GB/s = "
        "{value}, nine times NVLink. Put the 8 members 8 to a node instead and the ring leaves "
        "each node once, through its 8 cards.",
        "Step 2: the hardware — what a collective costs on each link",
        lambda: collective_time("all_reduce", 1 * GB, 8, NOMINAL_LINKS["ib_ndr"]) * 1e3,
        35.01,
        "ms",
    ),
    N(
        "c3-allreduce-nodes",
        "03_strategy",
        "advanced",
        "An all-reduce of 1 GB over 32 GPUs on 4 nodes of 8, each node with eight 50 GB/s "
        "InfiniBand cards (10 µs): ms?",
        "A ring leaves each node once, and NCCL spreads its channels over the node's cards: the "
        "2(N−1)/N·S = 1.94 GB one rank sends leave each node through 8 cards, 10 µs + 1.94 GB / "
        "400 GB/s = {value}. Charging each rank one card would say eight times that.",
        "Leaving the node",
        lambda: (
            collective_time("all_reduce", 1 * GB, 32, Hardware().link("all_reduce", 32, 8)) * 1e3
        ),
        4.854,
        "ms",
    ),
    N(
        "c3-zero3-volume",
        "03_strategy",
        "advanced",
        "ZeRO-3 on 7.5 B parameters in bf16 (large N): GB each GPU sends per step?",
        "3Ψ elements (all-gather forward, all-gather backward, reduce-scatter gradients) · 2 B = "
        "{value}; DDP and ZeRO-1/2 send 2Ψ.",
        "Step 2: the hardware — what a collective costs on each link",
        lambda: zero_step_volume(7.5e9, 3) / GB,
        45,
        "GB",
    ),
    # --- Chapter 7: memory
    N(
        "c7-replica",
        "07_memory",
        "basic",
        "Mixed-precision Adam: GB for one full replica of a 7 B model's states?",
        "16 B per parameter (2 weights + 2 gradients + 12 fp32 master, m, v) · 7 B = {value}.",
        "Where memory goes: the seed's 16 bytes",
        lambda: seed_estimate_memory(7, 1, 1),
        112,
        "GB",
    ),
    N(
        "c7-seed-14",
        "07_memory",
        "basic",
        "The seed's estimate_memory for 7 B parameters with T = 4, P = 2: GB per GPU?",
        "16 B · 7 B / (T·P) = {value} — model states only: no activations, no ZeRO, no context.",
        "Where memory goes: the seed's 16 bytes",
        lambda: seed_estimate_memory(7, 4, 2),
        14,
        "GB",
    ),
    N(
        "c7-zero1",
        "07_memory",
        "intermediate",
        "ZeRO-1, Ψ = 7.5 B, N_d = 64: GB of model states per GPU?",
        "4Ψ + 12Ψ/N_d = 30 + 1.41 = {value} (ZeRO paper, Fig. 1).",
        "Where memory goes: the seed's 16 bytes",
        lambda: sum(model_states(7.5e9, "bf16", 1, dp=64)) / GB,
        31.41,
        "GB",
    ),
    N(
        "c7-zero2",
        "07_memory",
        "intermediate",
        "ZeRO-2, Ψ = 7.5 B, N_d = 64: GB per GPU?",
        "2Ψ + 14Ψ/N_d = 15 + 1.64 = {value}.",
        "Where memory goes: the seed's 16 bytes",
        lambda: sum(model_states(7.5e9, "bf16", 2, dp=64)) / GB,
        16.64,
        "GB",
    ),
    N(
        "c7-zero3",
        "07_memory",
        "intermediate",
        "ZeRO-3, Ψ = 7.5 B, N_d = 64: GB per GPU?",
        "16Ψ/N_d = 120/64 = {value}.",
        "Where memory goes: the seed's 16 bytes",
        lambda: sum(model_states(7.5e9, "bf16", 3, dp=64)) / GB,
        1.875,
        "GB",
    ),
    N(
        "c7-hybrid-states",
        "07_memory",
        "advanced",
        "7 B parameters, T = 4, P = 2, D = 8, ZeRO-1, bf16: GB of model states per GPU?",
        "Ψ/(T·P) = 875 M per GPU; 4 B of it in weights and gradients, 12 B/D in optimizer states: "
        "3.5 + 1.31 = {value}.",
        "Where memory goes: the seed's 16 bytes",
        lambda: sum(model_states(7e9, "bf16", 1, dp=8, tp=4, pp=2)) / GB,
        4.812,
        "GB",
    ),
    N(
        "c7-recompute",
        "07_memory",
        "intermediate",
        "Full activation recomputation, s = 4096, b = 1, h = 4096, 16-bit: MB kept per layer?",
        "Only the layer input, 2·s·b·h = {value}.",
        "Activations of a Llama layer, counted",
        lambda: layer_activations(4096, 1, 4096, 32, recompute=True) / MB,
        33.55,
        "MB",
    ),
    # --- Chapter 9: demos (MFU, MoE)
    N(
        "c9-flops-token",
        "09_quick_demos",
        "basic",
        "Training FLOPs per token of a 7 B model, ignoring attention: how many GFLOP?",
        "6Ψ = 2Ψ forward + 4Ψ backward = {value}.",
        "Hybrid parallelism: a Llama under HybridParallelPlugin",
        lambda: flops_per_token(7e9) / 1e9,
        42,
        "GFLOP",
    ),
    N(
        "c9-flops-attention",
        "09_quick_demos",
        "intermediate",
        "The same with attention: Ψ = 7 B, L = 32, h = 4096, s = 4096. GFLOP per token?",
        "6Ψ + 12·L·h·s = 42 + 6.44 = {value}.",
        "Hybrid parallelism: a Llama under HybridParallelPlugin",
        lambda: flops_per_token(7e9, 32, 4096, 4096) / 1e9,
        48.44,
        "GFLOP",
    ),
    N(
        "c9-mfu",
        "09_quick_demos",
        "intermediate",
        "8 H200s (989.5 TFLOP/s bf16 each) train a 7 B model at 24,000 tokens/s in total. MFU, "
        "ignoring attention?",
        "24,000 · 42 GFLOP / (8 · 989.5 TFLOP/s) = {value}.",
        "Hybrid parallelism: a Llama under HybridParallelPlugin",
        lambda: mfu(24_000, flops_per_token(7e9), 8),
        0.1273,
    ),
    N(
        "c9-hfu-ratio",
        "09_quick_demos",
        "advanced",
        "With full recomputation, by what factor does hardware-FLOPs utilisation exceed MFU?",
        "The forward runs twice: 8Ψ instead of 6Ψ per token, a factor {value}; MFU does not count "
        "it.",
        "Hybrid parallelism: a Llama under HybridParallelPlugin",
        lambda: flops_per_token(7e9, recompute=True) / flops_per_token(7e9),
        1.333,
    ),
    N(
        "c9-moe-capacity",
        "09_quick_demos",
        "intermediate",
        "MoE routing: 4096 tokens, 8 experts, top-2, capacity factor 1.25. Slots per expert?",
        "C = ⌈capacity factor · k · T / E⌉ = ⌈1.25 · 2 · 4096 / 8⌉ = {value}; tokens beyond it "
        "are dropped.",
        "A MoE layer from scratch",
        lambda: expert_capacity(4096, 8, 2, 1.25),
        1280,
    ),
]
