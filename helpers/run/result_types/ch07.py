"""Chapter 7's demo results (``helpers/demos/ch07_*.py``): memory, and ZeRO-1 from scratch."""

from typing import Any

from helpers.run.result_types import Emitted


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
