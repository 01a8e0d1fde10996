"""Chapter 1's demo results (``helpers/demos/ch01_*.py``): the four ways to split the work."""

from typing import Any, NotRequired

from helpers.run.result_types import Emitted


class ColossalDdpResult(Emitted):
    losses: list[float]
    reference: list[float]
    max_diff: float
    world_size: int
    backend: str


class DpResult(Emitted):
    world_size: int
    global_batch: int
    local_batch: int
    samples: list[int]
    loss_local: float
    loss: float
    ref_loss: float
    max_grad_diff: float
    max_param_diff: float
    backend: str


class HybridResult(Emitted):
    layout: dict[str, Any]
    precision: str
    sp_mode: str | None
    zero: int
    attn: str
    steps: int
    batch: int
    seq: int
    gpu: str
    tokens_per_s: int
    peak_mib: float
    losses: NotRequired[list[float]]  # the last stage's keys, from here on
    reference: NotRequired[list[float]]
    max_diff: NotRequired[float]
    checked_steps: NotRequired[int]
    max_diff_all: NotRequired[float]
    expect_drift: NotRequired[bool]


class MaskViewResult(Emitted):
    part: str  # "mask"
    attn: str
    seq: int
    mask: list[int] | None
    blocked: int
    later_share: float
    next_share: float


class MaskReplayResult(Emitted):
    part: str  # "replay"
    attn: str
    losses: list[float]


class MaskSmallResult(MaskReplayResult):
    own_mask: float  # part "small"
    causal_mask: float


class PpResult(Emitted):
    world_size: int
    num_layers: int
    layers_per_stage: int
    layers: list[int]
    stage_layers: dict[str, list[int]]
    micro_batches: int
    micro_batch_size: int
    schedule: str
    loss: float | None
    ref_loss: float
    max_grad_diff: float
    bubble_fraction: float
    backend: str


class PpScheduleResult(Emitted):
    schedule: str
    stages: int
    chunks: int
    micro_batches: int
    micro_batch_size: int
    hidden: int
    blocks: list[int]
    actions: list[str]
    loss: float | None
    ref_loss: float
    max_grad_diff: float
    repeats: int
    backend: str


class PpEventsResult(Emitted):
    schedule: str
    repeat: int
    clock: Any
    events: list[Any]


class PpColossalResult(Emitted):
    colossal: list[dict[str, Any]]


class SpResult(Emitted):
    world_size: int
    batch: int
    seq_len: int
    local_seq: int
    heads: int
    local_heads: int
    head_dim: int
    tokens: list[int]
    x_local_shape: list[int]
    heads_shape: list[int]
    loss: float
    ref_loss: float
    max_out_diff: float
    max_x_grad_diff: float
    max_w_grad_diff: float
    backend: str
    dp: NotRequired[int]  # with data parallelism beside it
    rows: NotRequired[list[int]]
    sp_group: NotRequired[list[int]]


class TpResult(Emitted):
    world_size: int
    hidden: int
    ffn: int
    ffn_per_rank: int
    columns: list[int]
    w1_shard: list[int]
    w2_shard: list[int]
    loss: float
    ref_loss: float
    max_out_diff: float
    max_grad_diff: float
    grad_diffs: dict[str, float]
    backend: str
