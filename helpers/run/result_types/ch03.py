"""Chapter 3's demo results (``helpers/demos/ch03_*.py``): what collectives and layouts cost."""

from typing import Any, NotRequired

from helpers.run.result_types import Emitted


class CollectiveResult(Emitted):
    collective: str
    size_bytes: int
    n: int
    seconds: float
    seconds_min: float
    algbw: float
    busbw: float
    factor: float
    backend: str
    timing: str


class LayoutResult(Emitted):
    tp: int
    pp: int
    sp: int
    sp_mode: str | None
    zero: int
    dp: int
    microbatches: int
    recompute: bool
    step_s: float
    steps: int
    tokens_per_s: float
    peak_gib: float
    losses: list[float]
    params: int
    model: Any
    backend: str


class ShareResult(Emitted):
    layout: str
    global_batch: int
    per_rank_batch: int
    seq: int
    n: int
    overlap: bool
    t_step: float
    t_compute: float
    t_comm: float
    share: float
    above_half: bool
    tokens_per_s: float
    steps_on: list[float]
    steps_off: list[float]
    replicas_agree: bool
    first_loss_diff: float
    params: int
    dtype: str
    comm_ops: list[Any]
    comm_bytes: float
    messages: int
    model: dict[str, int]
    backend: str
    nccl_busy_s: NotRequired[float]  # the GPU's NCCL kernels (torch.profiler), when measured
    nccl_exposed_s: NotRequired[float]
    kernel_error: NotRequired[str]
