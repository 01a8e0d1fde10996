"""Chapter 8's demo results (``helpers/demos/ch08_*.py`` and the loops of
:mod:`helpers.train.faults`): node faults, deliberate failures, hangs and NCCL's log."""

from typing import Any, NotRequired

from helpers.run.result_types import Emitted


class NodesResult(Emitted):
    steps: int
    resumed_from: int
    weights_sha256: str
    restart_count: int
    world_size: int


class FailResult(Emitted):
    mode: str
    steps: int
    final_loss: float


class OomStepResult(Emitted):
    mode: str
    recompute: bool
    budget_mib: float
    loss: float
    predicted_activation_mib: float
    peak_rss_mib: float
    rss_growth_mib: float
    seconds: float


class FlightResult(Emitted):
    lab: str
    backend: str
    world_size: int
    done: list[str]
    error: str  # "" when the rank finished
    dumped: str  # the Watchdog's reason, "" when it dumped nothing (or under NCCL)
    rule: NotRequired[str]  # the pipeline lab's
    actions: NotRequired[list[str]]


class NcclInfoResult(Emitted):
    backend: str
    world_size: int
    nccl_version: str
    elements: int
    ran: list[str]
    values: list[float]


class FrameworkTrainResult(Emitted):
    """:mod:`helpers.demos.ch08_train`: the run's settings (``framework_run.describe``, the
    levers of ``levers.describe``), then what ``framework_run.run`` measured unless it ran out of
    memory."""

    framework: str
    layout: str
    plugin: str
    precision: str
    tp: int
    pp: int
    zero_stage: int
    micro_batch: int
    microbatches: int
    global_batch: int
    seq: int
    layers: int
    hidden: int
    recompute: bool
    overlap: int | None
    optimizer: str
    compiled: bool
    norm_on_device: bool
    sdpa: str
    fused_ce: bool
    compile_scope: str | None
    compile_mode: str | None
    recompute_layers: int
    fp8: str
    fuse_proj: bool
    plugin_kw: dict[str, Any]
    gpus: int
    oom: bool
    mem_cap_gib: float | None
    device: str
    losses: NotRequired[list[float | None]]  # framework_run.run's, absent after an OOM
    reference: NotRequired[list[float]]
    seconds_per_step: NotRequired[float]
    tokens_per_s: NotRequired[int]
    mfu: NotRequired[float]
    profile: NotRequired[dict[str, Any] | None]
    memory_snapshot: NotRequired[dict[str, Any] | None]
    params: NotRequired[int]
    error: NotRequired[str]  # the OOM's first line
    peak_mib: NotRequired[float]  # on GPUs
    reserved_mib: NotRequired[float]


class FrameworkBenchResult(FrameworkTrainResult):
    """:func:`helpers.train.framework_bench.main` (``ch06_deepspeed_train``, ``ch06_megatron``):
    Chapter 8's result, plus what the framework's builder adds."""

    notes: NotRequired[list[str]]
    deepspeed: NotRequired[str]
    deepspeed_config: NotRequired[dict[str, Any]]
    megatron_args: NotRequired[list[str]]
    megatron_core_kwargs: NotRequired[dict[str, Any]]
    core_attention: NotRequired[str]
    megatron_core: NotRequired[str]
