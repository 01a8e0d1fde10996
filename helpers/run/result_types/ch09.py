"""Chapter 9's demo results (``helpers/demos/ch09_*.py``): quick demos on GPUs and the CPU."""

from typing import Any, NotRequired

from helpers.run.result_types import Emitted


class DistCeResult(Emitted):
    margin: float
    loss_exact: float
    loss_colossal: float
    loss_torch_bf16: float
    target_grad_exact: float
    target_grad_torch_bf16: float
    target_grad_colossal: float
    other_grad_sum_colossal: float


class HybridResult(Emitted):
    layout: dict[str, Any]
    precision: str
    sp_mode: str | None
    zero: int
    mbs: int | None
    preset: str
    params: int
    batch: int
    seq: int
    steps: int
    optim: str
    repeat: int
    parallel_output: bool
    gpus: int
    gpu: str
    seconds_per_step: float
    tokens_per_s: int
    mfu: float
    peak_mib: float
    losses: NotRequired[list[float]]  # the last stage's keys, from here on
    reference: NotRequired[list[float]]
    max_diff: NotRequired[float | None]
    finite: NotRequired[bool]
    watch: NotRequired[Any]


class MixtralResult(Emitted):
    ep: int
    dp: int
    moe_dp: int
    zero: int
    precision: str
    experts: int
    layers: int
    hidden: int
    params: int
    expert_params: int
    local_expert_params: int
    batch: int
    seq: int
    steps: int
    tokens_per_s: int
    seconds_per_step: float
    peak_mib: float
    losses: list[float]
    reference: list[float]
    max_diff: float
    gpu: str


class MoeResult(Emitted):
    experts: int
    k: int
    ep: int
    dp: int
    ep_rank: int
    dp_rank: int
    tokens: int
    capacity: int
    capacity_factor: float
    local_experts: list[int]
    routed: Any
    kept: Any
    dropped: int
    balance_loss: float
    diffs: dict[str, float]
    backend: str
    hidden: int
    ffn: int
    element_size: int
    sent: Any
    all_to_alls: Any
    saved_bytes: float


class MoeBalanceResult(Emitted):
    runs: list[dict[str, Any]]
    world: int
    experts: int
    k: int
    tokens: int
    hidden: int
    ffn: int
    capacity_factor: float
    skew: float
    steps: int
    lr: float
    capacity: int


class ResnetEvalResult(Emitted):
    epoch: int
    accuracy: float
    data: str
    test_images: int


class ResnetTrainResult(Emitted):
    plugin: str
    data: str
    world_size: int
    epochs: int
    start_epoch: int
    lr: float
    optimizer: str
    milestones: list[int]
    losses: list[float]
    accuracy: float
    images_per_s: float
    peak_mib: float
    backend: str
    sync_batchnorm: bool


class RingConfigResult(Emitted):
    mode: str
    sp_group: list[int]
    tp_group: list[int]
    mesh_shape: list[int]
    sp_axis: int
    enable_flash_attention: bool
    parallel_output: bool
    inner_ring_size: int | None


class RingResult(Emitted):
    method: str  # "ring"
    layout: str
    world_size: int
    positions: list[Any]
    work: Any
    sent: Any
    max_diff: float
    backend: str
    shape: list[int]
    element_size: int


class UlyssesResult(Emitted):
    method: str  # "ulysses"
    world_size: int
    ran: bool
    shape: list[int]
    sent: NotRequired[Any]  # when it ran, from here on
    max_diff: NotRequired[float]
    element_size: NotRequired[int]
    reason: NotRequired[str]  # when it did not


class SpSweepResult(Emitted):
    layout: str
    sp_mode: str | None
    tp: int
    sp: int
    seq: int
    preset: str
    flash_attn_available: bool
    oom: bool
    peak_mib: float
    tokens_per_s: NotRequired[int]  # when it fit
    mfu: NotRequired[float]
    error: NotRequired[str]  # when it ran out of memory
