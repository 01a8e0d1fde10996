"""Chapter 7's demo results (``helpers/demos/ch07_*.py``): memory, and ZeRO-1 from scratch; and the
activation-offload record, whose rows :mod:`helpers.record.offload` measures in its own process."""

from typing import Any, NotRequired, TypedDict

from helpers.run.result_types import Emitted
from helpers.run.result_types.records import Record


class MemoryResult(Emitted):
    layout: dict[str, Any]
    backend: str
    memory: dict[str, Any]
    phases: Any
    measured: Any
    census: Any
    prediction: dict[str, Any]
    loss_first: float | None
    loss_last: float | None
    step_seconds: float
    tokens_per_s: float
    params: int


class Zero1Result(Emitted):
    world_size: int
    backend: str
    steps: int
    params: int
    padded: int
    pad: int
    shard: int
    owned: list[int]
    max_param_diff: float
    max_state_diff: float
    optimizer_bytes: int
    predicted_optimizer_bytes: int
    padding_bytes: int
    unsharded_optimizer_bytes: int
    weight_bytes: int
    grad_bytes: int
    comm_reduce_scatter_bytes: float
    comm_all_gather_bytes: float
    comm_total_bytes: float
    comm_all_reduce_bytes: float


class OffloadRun(TypedDict):
    """A row of :mod:`helpers.record.offload` (one process, measured in the recorder itself): one
    configuration at one micro-batch; a row that ran out of memory has ``oom`` and ``error`` but
    no measurement, one the budget left out has ``not_run``."""

    name: str
    size: str  # "b" or "B": which of the record's two micro-batches
    mode: str  # "none", "offload", "save_on_cpu" or "recompute"
    micro_batch: int
    ok: bool
    oom: bool
    losses: NotRequired[list[float]]
    step_seconds: NotRequired[list[float]]
    tokens_per_s: NotRequired[int]
    tokens_per_s_min: NotRequired[int]
    tokens_per_s_max: NotRequired[int]
    peak_gib: NotRequired[float]
    reserved_gib: NotRequired[float]
    offloaded_bytes: NotRequired[int]
    host_pinned_bytes: NotRequired[int | None]
    seconds: NotRequired[float]
    loss_ok: NotRequired[bool]
    loss_reference: NotRequired[str]
    max_loss_gap: NotRequired[float]
    error: NotRequired[str]
    not_run: NotRequired[str]


class OffloadChoice(TypedDict):
    b: int
    B: int
    why: str
    gpu_bytes: NotRequired[float]
    host_free_bytes: NotRequired[float]
    predicted_gib: NotRequired[dict[str, float]]


class OffloadRecord(Record):
    """``ch07_offload``: the rows, the micro-batches and why, the pinned copy bandwidth."""

    runs: list[OffloadRun]
    choice: OffloadChoice
    bandwidth: dict[str, dict[str, float]]  # direction -> MiB copied -> GB/s
    seq: int
    loss_tolerance: float
    warmup: int
    steps: int
    shape: dict[str, int]
