"""Chapter 11's questions on torch's own mesh and on step traces (Chapter 2, "torch's own mesh"
and "One step as a trace").

Numeric questions carry ``reference``, computed with :func:`helpers.parallel.device_mesh.
local_shape` (what a DTensor placement leaves on a rank), :func:`helpers.chapters.ch02_trace.
expected_collectives` (the collectives of Chapter 2's step) and :class:`helpers.train.trace.
StepTrace` (overlapped, exposed and idle time); see :mod:`helpers.chapters.ch11_interview` for the
record type.
"""

from __future__ import annotations

import math
from functools import partial

from helpers.chapters.ch11_interview import Question

CHAPTER = "02_combining"
N = partial(Question, fmt="{:.4g}")
MESH, TRACE = "torch's own mesh", "One step as a trace"


def _up_projection_elements() -> float:
    from helpers.parallel.device_mesh import local_shape

    # h = 4096: the up projection's weight (4h, h), ColwiseParallel over tp = 8, FSDP2 over dp = 4
    return math.prod(local_shape([16384, 4096], ["_S(0, 8)", "S(0)"], [4, 8]))


def _collectives() -> float:
    from helpers.chapters.ch02_trace import expected_collectives

    return expected_collectives(layers=12, tp=4, dp=2)


def _trace(what: str) -> float:
    from helpers.train.trace import StepTrace

    # a 100 ms step: compute 0-60 ms; gradient all-reduces 40-90 ms
    t = StepTrace((0.0, 100e3), [(0.0, 60e3)], [(40e3, 90e3)])
    return t.numbers()[what]


QUESTIONS = [
    N(
        "c2-dtensor-local-elements",
        CHAPTER,
        "intermediate",
        "A transformer MLP's up projection is an nn.Linear(4096, 16384). On a DeviceMesh "
        "(dp=4, tp=8) it is split by ColwiseParallel over tp, then FSDP2's fully_shard over dp. "
        "How many elements of the weight does each rank hold?",
        "The weight is (16384, 4096). ColwiseParallel shards dim 0 over the 8 tp ranks, and "
        "FSDP2 shards the same dim 0 again over the 4 dp ranks (a strided shard): 16384 / 32 = "
        "512 rows of 4096, {value}, 1/32 of the weight.",
        MESH,
        _up_projection_elements,
        2_097_152,
        "elements",
        fmt="{:,.0f}",
    ),
    N(
        "c2-collectives-per-step",
        CHAPTER,
        "intermediate",
        "Chapter 2's stack of L = 12 Megatron MLP blocks (weights A, a, B, b each) trains on "
        "D = 2 × T = 4 ranks, the gradient averaged by one all-reduce per tensor. How many "
        "collectives does one rank enter in one step (no pipeline)?",
        "Tensor parallel: g all-reduces once in each block's forward (12) and f once in each "
        "backward except the first block's, whose input needs no gradient (11); data parallel: "
        "4 tensors × 12 blocks = 48. Total {value}, as the profiler counts them.",
        TRACE,
        _collectives,
        71,
    ),
    N(
        "c2-exposed-communication",
        CHAPTER,
        "basic",
        "A rank's 100 ms step computes from 0 to 60 ms; its gradient all-reduces run from 40 to "
        "90 ms. How many ms of communication are exposed (not hidden under compute)?",
        "Communication lasts 50 ms; 20 ms of it (40-60) run beside compute. Exposed: {value}. The "
        "last 10 ms of the step are idle.",
        TRACE,
        lambda: _trace("exposed_ms"),
        30,
        "ms",
    ),
    N(
        "c2-hidden-share",
        CHAPTER,
        "basic",
        "Same trace (compute 0-60 ms, all-reduces 40-90 ms): what share of the communication is "
        "hidden under compute?",
        "20 ms of 50 ms: {value}. The other 30 ms are exposed.",
        TRACE,
        lambda: _trace("hidden_share"),
        0.4,
        fmt="{:.2f}",
    ),
    Question(
        "c2-devicemesh-vs-pgmesh",
        CHAPTER,
        "intermediate",
        "torch's init_device_mesh('cuda', (2, 4), mesh_dim_names=('dp', 'tp')) and Colossal-AI's "
        "ProcessGroupMesh(2, 4) on 8 ranks: do they build the same groups, and when is each "
        "group created?",
        "The same: both number ranks in C order with the last axis fastest, so tp groups are "
        "{0-3}, {4-7} and dp groups {0,4}, {1,5}, {2,6}, {3,7} in both. DeviceMesh creates every "
        "group of every axis in its constructor (one split of the NCCL communicator per axis when "
        "the default group is bound to a device, otherwise a new_group per group); "
        "ProcessGroupMesh creates an axis's groups on the first get_group_along_axis call, which "
        "every rank must make, in the same order. DeviceMesh.from_group can wrap Colossal-AI's "
        "groups so that torch's FSDP2 and tensor-parallel APIs run on them.",
        MESH,
    ),
    Question(
        "c2-strided-shard",
        CHAPTER,
        "advanced",
        "After parallelize_module(ColwiseParallel) over tp and fully_shard over dp, the up "
        "projection's weight prints placements (_StridedShard(dim=0, sf=2), Shard(dim=0)). Why "
        "not (Shard(0), Shard(0))?",
        "Tensor parallel split dim 0 first, into T contiguous blocks; FSDP2 then splits each "
        "rank's block again along dim 0 over D. The rows a rank holds are therefore not the "
        "r-th contiguous 1/(D·T) of the full weight, which (Shard(0), Shard(0)) would mean: the "
        "dp split is strided by the T tensor-parallel blocks (split factor 2 for T = 2). Gathering "
        "the full weight then takes two all-gathers in order.",
        MESH,
    ),
    Question(
        "c2-trace-overlap",
        CHAPTER,
        "intermediate",
        "In a profiler trace of a data × tensor step, which communication can overlap compute, "
        "and which cannot?",
        "The tensor-parallel all-reduces (g in the forward, f in the backward) sit on the "
        "critical path: the next matmul needs their result, so the rank waits. The data-parallel "
        "gradient all-reduce of a layer can start as soon as that layer's gradient exists and "
        "run while the backward pass continues through earlier layers (hooks, as DDP's buckets "
        "do); only what is still running after the last backward operator is exposed.",
        TRACE,
    ),
]
