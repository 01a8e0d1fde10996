"""Chapter 11's questions on Chapter 8's one-H200 flagship: the levers, the fused loss and FP8.

Numeric answers are computed by the helpers Chapter 8 uses (:mod:`helpers.train.presets` for the
book's MFU, :mod:`helpers.train.linear_ce` for the logits' bytes, :mod:`helpers.train.fp8` for the
FP8 step's speed-up); ``stored`` is the answer key that ``tests/test_ch11_flagship.py`` checks
against ``reference``. See :mod:`helpers.chapters.ch11_interview` for the record type.
"""

from __future__ import annotations

from functools import partial

from helpers.chapters.ch11_interview import Question
from helpers.cost.mfu import H200_BF16_PEAK
from helpers.models.llama import llama_config
from helpers.train.fp8 import H200_FP8_PEAK, step_speedup
from helpers.train.linear_ce import logits_bytes
from helpers.train.presets import mfu

N = partial(Question, fmt="{:.4g}")
CH = "08_troubleshooting"
LEVERS = "One H200, one lever per row"
FP8 = "FP8 on one H200"


def _flagship_mfu(tokens_per_s: float) -> float:
    config = llama_config(16, 2048, 16, None, 32000, 2048)  # the flagship, 0.94 B
    return 100 * mfu(config, 2048, tokens_per_s, 1)


QUESTIONS = [
    N(
        "c8-logits-bytes",
        CH,
        "basic",
        "A causal LM with a 32,000-word vocabulary trains on a micro-batch of 16 sequences of "
        "2,048 tokens. How many GB do its fp32 logits take?",
        "16·2048 positions × 32,000 × 4 B = {value}, written once and read by the cast, the "
        "log-softmax and its gradient: the traffic a fused linear cross-entropy removes.",
        LEVERS,
        lambda: logits_bytes(16 * 2048, 32000) / 1e9,
        4.194,
        "GB",
    ),
    N(
        "c8-chunk-bytes",
        CH,
        "intermediate",
        "The same loss computed in chunks of 4,096 positions: MB of fp32 logits alive at once?",
        "4096 × 32,000 × 4 B = {value}: one chunk instead of all 8, which is what lets the "
        "micro-batch grow.",
        LEVERS,
        lambda: logits_bytes(4096, 32000) / 1e6,
        524.3,
        "MB",
    ),
    N(
        "c8-flagship-mfu",
        CH,
        "intermediate",
        "The 0.94 B flagship Llama (16 layers, hidden 2048, vocabulary 32,000, sequence 2048) "
        "trains at 95,894 tokens/s on one H200. Its MFU in %, by the book's count (6N + 12·L·h·s "
        "FLOPs per token, N without the input embedding, 989.5 TFLOP/s)?",
        "(6N + 12·L·h·s) × 95,894 / 989.5e12 = {value} %.",
        LEVERS,
        lambda: _flagship_mfu(95894),
        58.69,
        "%",
    ),
    N(
        "c8-ceiling-share",
        CH,
        "intermediate",
        "A run reaches 58.7 % MFU against the 989.5 TFLOP/s datasheet peak; the measured bf16 "
        "matmul ceiling of the same GPU is 780.7 TFLOP/s. What fraction of that ceiling is it?",
        "0.587 × 989.5 / 780.7 = {value}: the datasheet peak is not reachable by any matmul, so "
        "about 79 % MFU is the real top for this count.",
        LEVERS,
        lambda: 0.587 * H200_BF16_PEAK / 780.7e12,
        0.744,
    ),
    N(
        "c8-fp8-amdahl",
        CH,
        "advanced",
        "Matrix multiplies are 70 % of a bf16 step. In FP8 they run 1.6 times faster (casts and "
        "transposes eat part of the 2× peak). How much faster is the whole step?",
        "Amdahl: 1 / (0.3 + 0.7/1.6) = {value}; everything that is not a matmul (attention, "
        "norms, the optimizer) keeps its time.",
        FP8,
        lambda: step_speedup(0.7, 1.6),
        1.356,
        "×",
    ),
    N(
        "c8-fp8-peak",
        CH,
        "basic",
        "The H200's dense FP8 tensor-core peak over its dense bf16 peak (datasheet)?",
        "1979 / 989.5 TFLOP/s = {value}: the ceiling of any FP8 gain, reached only by matmuls.",
        FP8,
        lambda: H200_FP8_PEAK / H200_BF16_PEAK,
        2.0,
        "×",
    ),
    Question(
        "c8-liger-sync",
        CH,
        "advanced",
        "A fused linear cross-entropy removed GPU work from every step, yet at micro-batch 16 "
        "the step became slower; at a larger micro-batch the same loss made it faster. Why?",
        "The kernel's forward reads a count back to the host (Liger-Kernel 0.8.5 calls "
        "`.item()` on the number of non-ignored targets). The host then waits for the whole "
        "forward before it can launch the backward, and the GPU idles while the launches catch "
        "up: the profiled kernels sum to less than the step. A larger micro-batch makes the "
        "GPU's work longer than the host's launches, which hides the wait again. Read the idle "
        "time, not only the kernel times.",
        LEVERS,
    ),
    Question(
        "c8-colossal-fp8",
        CH,
        "advanced",
        "Colossal-AI 0.5.0's `linear_fp8` fails on torch 2.11 with \"shape '[8192, 2048]' is "
        'invalid for input of size 2048". What happened?',
        "Its autograd function takes `torch._scaled_mm(...)[0]`, written when the op returned "
        "(output, amax). Since torch 2.5 it returns the output alone, so `[0]` is the output's "
        "first row (2048 values) and the reshape to (8192, 2048) fails. An API change, not a "
        "numerical problem; the notebook reproduces it on the CPU.",
        FP8,
    ),
    Question(
        "c8-fp8-communication",
        CH,
        "intermediate",
        "What does `fp8_communication=True` change for LowLevelZero at world size 1, and at 8?",
        "It casts what ZeRO communicates to FP8 with a scale: the gradients' all-reduce or "
        "reduce-scatter and the parameters' all-gather (`all_reduce_fp8`, `reduce_scatter_fp8`, "
        "`all_gather_fp8` in low_level_optim.py). At world size 1 nothing is communicated, so "
        "nothing changes; at 8 the bytes on the wire halve against bf16, at the cost of casts "
        "and of FP8 rounding in the summed gradients.",
        FP8,
    ),
]
