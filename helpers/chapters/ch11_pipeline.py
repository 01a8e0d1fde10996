"""Chapter 11's questions on pipeline schedules (Chapter 1, "Pipeline schedules").

Numeric questions carry ``reference``, computed with :mod:`helpers.parallel.pp_schedules` (the
schedules, their bubble formulas and the dependency simulator); see
:mod:`helpers.chapters.ch11_interview` for the record type.
"""

from __future__ import annotations

from functools import partial

from helpers.chapters.ch11_interview import Question
from helpers.parallel.pp_schedules import bubble_formula, build, in_flight, simulate

CHAPTER = "01_dimensions"
N = partial(Question, fmt="{:.4g}")


def idle_time(name: str, p: int, m: int) -> float:
    """Idle time of one stage over a step (all stages idle alike here), in units of one
    forward, with F, B and W each costing one (a whole backward BW two)."""
    timeline = simulate(build(name, p, m))
    end = max(e for row in timeline for _, e, _ in row)
    return end - sum(e - s for s, e, _ in timeline[0])


QUESTIONS = [
    N(
        "c1-interleaved-bubble",
        CHAPTER,
        "intermediate",
        "A pipeline of P = 4 stages runs m = 8 micro-batches with the interleaved 1F1B schedule, "
        "c = 2 model chunks per stage. What share of the step does each stage idle?",
        "(P−1)/(c·m+P−1) = 3/19 = {value}: each chunk's forward and backward are 1/c of a "
        "stage's, so the warm-up and cool-down shrink c-fold (Narayanan et al. 2021's "
        "(P−1)/(c·m) relative to the ideal time). Plain 1F1B idles 3/11.",
        "Four orders of the same work",
        lambda: bubble_formula("interleaved", 4, 8, 2),
        0.1579,
    ),
    N(
        "c1-zbh1-bubble",
        CHAPTER,
        "intermediate",
        "Same pipeline (P = 4, m = 8), ZB-H1: the backward split into input gradient B and "
        "weight gradient W, F, B and W costing the same. What share of the step does each "
        "stage idle?",
        "Qi et al.'s idle time (P−1)(t_f+t_in−t_w) = 3 units beside m·3 = 24 units of work: "
        "3/27 = {value}. Each W is moved into a slot that would otherwise be idle.",
        "Splitting the backward: zero bubble",
        lambda: bubble_formula("zb-h1", 4, 8),
        0.1111,
    ),
    N(
        "c1-zbh1-vs-1f1b",
        CHAPTER,
        "advanced",
        "With F, B and W costing the same, by what factor does ZB-H1 cut 1F1B's idle time per "
        "stage (P = 4, m = 8)?",
        "1F1B idles (P−1)(t_f+t_in+t_w) = 9 units, ZB-H1 (P−1)(t_f+t_in−t_w) = 3: a factor of "
        "{value}, the same for every P and m ≥ P; the book's simulator of both orders agrees.",
        "Splitting the backward: zero bubble",
        lambda: idle_time("1f1b", 4, 8) / idle_time("zb-h1", 4, 8),
        3.0,
    ),
    N(
        "c1-inflight-gpipe-1f1b",
        CHAPTER,
        "basic",
        "P = 4 stages, m = 32 micro-batches. How many times more micro-batches' activations "
        "does the first stage hold at its peak under GPipe than under 1F1B?",
        "GPipe runs all 32 forwards before any backward: 32 in flight. 1F1B starts the "
        "backwards after P = 4 forwards: 4. The ratio is m/P = {value}, at the same bubble.",
        "Four orders of the same work",
        lambda: in_flight(build("gpipe", 4, 32))[0] / in_flight(build("1f1b", 4, 32))[0],
        8.0,
    ),
    Question(
        "c1-why-w-waits",
        CHAPTER,
        "intermediate",
        "Why may a stage postpone the weight-gradient part of its backward, but not the "
        "input-gradient part?",
        "The previous stage waits for the input gradient: it is on the critical path of every "
        "stage before it. The weight gradient is needed by nobody until the optimizer step, so it "
        "can run whenever the stage would otherwise idle. The price is memory: the stage keeps "
        "the layer inputs and output gradients of each postponed W until it runs.",
        "Splitting the backward: zero bubble",
    ),
    Question(
        "c1-interleaved-cost",
        CHAPTER,
        "advanced",
        "The interleaved schedule shrinks the bubble by c. What does it cost?",
        "c times as many point-to-point messages (every chunk boundary is a stage boundary), "
        "more activations in flight on the first stage during warm-up (11 instead of 4 for "
        "P = 4, m = 8, c = 2), and m must be a multiple of P in Megatron-LM's ordering. On a "
        "slow inter-node link the extra messages can eat the gain.",
        "Four orders of the same work",
    ),
    Question(
        "c1-measure-bubble",
        CHAPTER,
        "advanced",
        "You time a 4-stage pipeline on a laptop with 2 cores and find 50 % idle where the "
        "formula says 27 %. What went wrong, and how do you measure the bubble there?",
        "Four processes share two cores, so the wall clock also measures the operating system's "
        "time-sharing and the message latency. Time each computation by the thread's CPU time "
        "instead, and let every message carry its sender's clock (a Lamport clock): a receive "
        "moves the receiver's clock up to the sender's. The result is the timeline the run would "
        "have with a processor per stage, and its idle share lands near the formula.",
        "The bubble measured",
    ),
    Question(
        "c1-colossal-zbv-gpu",
        CHAPTER,
        "intermediate",
        'In Colossal-AI 0.5.0, what does `pp_style="zbv"` need that `"interleaved"` does '
        "not, and what of the two runs without a GPU?",
        "zbv needs `num_model_chunks=2` and the `scheduler_nodes` that "
        "`PipelineGraph(...).get_v_schedule()` computes; both plugins construct on CPU ranks, "
        "and the graph's schedule is plain Python. Training needs GPUs: the interleaved "
        "pipeline's first send checks `torch.distributed.is_hccl_available`, which CPU builds "
        "of torch lack, and the zbv model's `LinearWithGradAccum` layers call the CPU "
        "accelerator's `get_rng_state` with an argument it does not take.",
        "Pipeline schedules in Colossal-AI",
    ),
]
