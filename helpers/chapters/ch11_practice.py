"""Chapter 11's questions on Chapter 12 (in practice): published layouts, their numbers, and what
the book's models say about them.

Questions of the interview bank (:mod:`helpers.chapters.ch11_interview` has the record type);
numeric ones compute their answer with the helper Chapter 12 uses (``data_degree``,
``bubble_fraction``, :mod:`helpers.cost.moe`, the published data of
:mod:`helpers.chapters.ch12_published`), and ``tests/test_ch12_questions.py`` checks each
``stored`` key against it.
"""

from __future__ import annotations

from functools import partial

from helpers.chapters.ch11_interview import Question
from helpers.chapters.ch12_published import DEEPSEEK_V3, by_key
from helpers.cost.hardware import A100_BF16_PEAK
from helpers.cost.moe import MoEShape
from helpers.parallel.layouts import data_degree
from helpers.parallel.pp import bubble_fraction

CH = "12_in_practice"
N = partial(Question, fmt="{:.4g}")
Q = Question


def _dsv3_tokens_per_gpu_s() -> float:
    hours = DEEPSEEK_V3.reported["H800 GPU hours per 1e12 tokens"]
    return 1e12 / (hours * 3600)


def _megatron_1t_mfu() -> float:
    # eq. (3) counts four forward passes' work (recomputation): model FLOPs are 3/4 of it
    return by_key("MEG-1008.0B").reported["TFLOP/s per GPU"] * 1e12 * 3 / 4 / A100_BF16_PEAK


QUESTIONS = [
    N(
        "c12-llama-dp",
        CH,
        "basic",
        "Llama 3 405B trained on 16,384 H100s with tensor parallelism 8 and pipeline parallelism "
        "16 (no context parallelism). How many data-parallel replicas?",
        "D = G / (T·P) = 16,384 / (8 × 16) = {value}.",
        "Six published trainings",
        lambda: data_degree(16384, tp=8, pp=16),
        128,
    ),
    N(
        "c12-llama-cp-dp",
        CH,
        "intermediate",
        "For the 128K-token stage the same 16,384 GPUs add context parallelism 16. How many "
        "data-parallel replicas are left?",
        "D = G / (T·C·P) = 16,384 / (8 × 16 × 16) = {value}: a sixteenth of the replicas, each "
        "sequence now spread over 16 GPUs.",
        "Six published trainings",
        lambda: data_degree(16384 // 16, tp=8, pp=16),
        8,
    ),
    N(
        "c12-llama-bubble",
        CH,
        "intermediate",
        "At 16K GPUs Llama 3 runs 16 sequences per data-parallel replica through 16 pipeline "
        "stages. With one sequence per micro-batch, what share of a plain 1F1B step is bubble?",
        "m = 16, P = 16: (P−1)/(m+P−1) = 15/31 = {value}. Almost half: why Llama 3 runs an "
        "interleaved schedule with V stages per rank, which divides the idle slots by V.",
        "Where the model is far off, and why",
        lambda: bubble_fraction(16, 16),
        0.4839,
    ),
    N(
        "c12-megatron-bubble",
        CH,
        "intermediate",
        "Megatron-LM's 1T model: 3,072 GPUs, T = 8, P = 64, global batch 3,072 sequences, one "
        "sequence per micro-batch. The 1F1B bubble share?",
        "D = 3,072/512 = 6, m = 3,072/6 = 512: 63/575 = {value}.",
        "The book's models against the published figures",
        lambda: bubble_fraction(64, 3072 // data_degree(3072, tp=8, pp=64)),
        0.1096,
    ),
    N(
        "c12-dsv3-tokens",
        CH,
        "basic",
        "DeepSeek-V3 reports 180K H800 GPU hours per trillion training tokens. Tokens per second "
        "per GPU?",
        "10¹² / (180,000 × 3,600 s) = {value} tokens/s per GPU.",
        "Six published trainings",
        _dsv3_tokens_per_gpu_s,
        1543,
        "tokens/s",
    ),
    N(
        "c12-dsv3-active",
        CH,
        "advanced",
        "DeepSeek-V3: 61 layers of width 7,168 with MLA, the first 3 dense (FFN 18,432), then "
        "1 shared + 256 routed experts of width 2,048, 8 routed per token, vocabulary 129,280. "
        "Parameters a token uses, in billions?",
        "Attention of all layers + dense FFNs + shared experts and routers + embeddings + "
        "58 × 8 routed experts (3 × 7,168 × 2,048 each) = {value} B, the report's 37 B.",
        "Six published trainings",
        lambda: MoEShape().active_params / 1e9,
        37.55,
        "B",
    ),
    N(
        "c12-megatron-mfu",
        CH,
        "advanced",
        "Megatron-LM reports 163 TFLOP/s per A100 (312 peak) for its 1T model, counted with "
        "full activation recomputation. Its MFU, ignoring the attention and logit terms' share "
        "difference?",
        "Recomputation adds one forward to three passes' work: model FLOPs are 3/4 of the "
        "counted ones, 163 × 3/4 / 312 = {value}, not the 52 % of peak the table prints.",
        "The book's models against the published figures",
        _megatron_1t_mfu,
        0.3918,
    ),
    Q(
        "c12-no-tp",
        CH,
        "intermediate",
        "DeepSeek-V3 trained a 671 B model on 2,048 H800s with no tensor parallelism. How?",
        "Only 37 B parameters run per token, and the experts are sharded by expert parallelism "
        "(64-way over 8 nodes) instead of by TP; the dense part is small enough for 16 pipeline "
        "stages and ZeRO-1. The H800's NVLink (160 GB/s achievable) is cut, so TP's 4 all-reduces "
        "per layer would cost more than on an H100; DualPipe overlaps the expert all-to-all with "
        "compute instead.",
        "Patterns a reader can reuse",
    ),
    Q(
        "c12-cp-when",
        CH,
        "intermediate",
        "Llama 3 adds context parallelism only in its 128K-token stage. Why not from the start?",
        "At 8K tokens one sequence's activations fit on a node's GPUs with T = 8 alone; "
        "CP costs K, V all-gathers per layer and takes a factor of the data-parallel degree (128 "
        "replicas become 8). At 128K tokens one sequence's activations are 16 times larger and "
        "attention's s² work dominates: splitting the sequence is the only way to fit it.",
        "Patterns a reader can reuse",
    ),
    Q(
        "c12-planner-disagrees",
        CH,
        "advanced",
        "The book's planner ranks Megatron-LM's published 1T layout 21st and prefers T = 2 with "
        "Ulysses S = 4 and no recomputation. Is the paper wrong?",
        "No: the planner knows only its own menu. Ulysses appeared two years later, and "
        "Megatron's authors removed most recomputation with sequence parallelism and selective "
        "recomputation in their next paper (Korthikanti et al. 2022). The preference is a real "
        "improvement that was not available, not a mistake in the published layout.",
        "The planner against the published choices",
    ),
]
