"""Chapter 5's demo results (``helpers/demos/ch05_*.py``): launching, hosts, mesh orders, resharding
checkpoints on resume."""

from typing import Any, NotRequired, TypedDict

from helpers.run.result_types import Emitted


class StepSignals(TypedDict):
    """:class:`helpers.train.signals.Signals` as a dict: one log interval on rank 0."""

    steps: int
    seconds: float
    samples_per_s: float
    tokens_per_s: float
    memory: dict[str, float]
    comm_wait_share: float | None
    comm_busy_share: float | None


class StepLoss(Emitted):
    """:func:`helpers.train.loop.train` on rank 0, after each step."""

    step: int
    loss: float


class StepSignalsResult(Emitted):
    """:func:`helpers.train.loop.train` on rank 0, at each log interval."""

    step: int
    signals: StepSignals


class TrainResult(Emitted):
    final: bool
    losses: list[float]
    digest: str | None
    world_size: int
    plugin: str
    backend: str
    last_checkpoint: str | None


class HostfileResult(Emitted):
    sum: float
    host: str
    resolves: Any
    ifname: Any


class MeshOrderResult(Emitted):
    timings: dict[str, Any]
    checks: dict[str, Any]
    groups: dict[str, Any]
    shape: dict[str, int]


class MeshOrderLinkResult(Emitted):
    link: Any
    rows: list[Any]


class NodeEgressResult(Emitted):
    link: Any
    per_host: int
    members: dict[str, Any]
    seconds: dict[str, Any]
    checks: dict[str, Any]
    all_correct: bool


class NodeEgressHostResult(Emitted):
    host: int
    egress: Any


class SlurmResult(Emitted):
    world_size: int
    via: str
    host: str
    sum: float
    backend: str
    env: dict[str, str | None]
    import_s: float
    dynamo_s: float
    init_s: float
    clock: float


class DcpChunk(TypedDict):
    """A block of a 2-D weight: global offsets and sizes (a saved one names its file's rank)."""

    offsets: list[int]
    sizes: list[int]
    rank: NotRequired[int]


class DcpSaveResult(Emitted):
    phase: str
    dir: str
    world_size: int
    weight: str
    losses: list[float]
    blocking_s: list[float]
    async_return_s: list[float]
    async_complete_s: list[float]
    overlapped_return_s: float
    overlapped_complete_s: float
    steps_while_writing: int
    state_bytes: int
    chunk: DcpChunk
    saved_chunks: NotRequired[list[DcpChunk]]  # rank 0's


class DcpLayoutRun(TypedDict):
    losses: list[float]
    chunk: DcpChunk


class DcpLoadResult(Emitted):
    phase: str
    dir: str
    world_size: int
    weight: str
    layouts: dict[str, DcpLayoutRun]
    async_vs_sync: float
    weights_only: list[float]
    from_scratch: list[float]


class DsUniversalResult(Emitted):
    phase: str
    deepspeed: str
    tp: int
    zero: int
    dp: int
    world_size: int
    losses: NotRequired[list[float]]
    error: NotRequired[str]  # a load that DeepSpeed refused
