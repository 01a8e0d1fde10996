"""What a recording stores, ``results/<hardware>/<name>.json`` (written by
:func:`helpers.record.results.save`): the provenance, the runs, and a recorder's own top-level
fields. A run of the recorders' shared loop (:func:`helpers.record.runner.run_one`) holds its
demo's results; a record type narrows ``runs`` (and a run type ``results``) to what its recorder
stores, so a reader's keys are checked from the record down to the demo's result."""

from typing import Any, NotRequired, TypedDict

from helpers.run.result_types.ch08 import FrameworkTrainResult


class Provenance(TypedDict):
    hardware: str
    gpus: list[str]
    date: str
    versions: dict[str, str]
    command: str
    git_commit: str
    git_dirty: NotRequired[bool | None]  # absent from records made before it was kept


class Record(TypedDict):
    provenance: Provenance
    runs: list[Any]
    quick: NotRequired[bool]  # runs of the quick smoke recording (results.recorded's quick=True)


class RecordedRun(TypedDict):
    """A run of :func:`helpers.record.runner.run_one` (or one not started: ``not_run``)."""

    name: str
    demo: str
    gpus: int
    args: list[str]
    ok: bool
    results: list[Any]  # every rank's RESULT lines
    command: NotRequired[str]
    seconds: NotRequired[float]
    part: NotRequired[str]
    summary: NotRequired[dict[str, Any]]
    error: NotRequired[str]
    failure: NotRequired[str]
    failed_rank: NotRequired[int | None]
    returncode: NotRequired[int | None]
    timeout_s: NotRequired[float]
    not_run: NotRequired[str]
    provenance: NotRequired[Provenance]  # a run kept from an earlier recording (merge_runs)


class RunSummary(TypedDict):
    """A flagship run in one row (:func:`helpers.record.flagship_summary.summarize`); a run that
    failed has ``name``, ``ok`` and ``error`` only. The lever records' rows
    (:func:`helpers.record.flagship_levers.row`) add the levers and the share of the matmul
    ceiling."""

    name: str
    ok: bool
    error: NotRequired[str]
    framework: NotRequired[str]
    plugin: NotRequired[str]
    optimizer: NotRequired[str]
    compiled: NotRequired[bool | None]
    zero_stage: NotRequired[int | None]
    norm_on_device: NotRequired[bool]
    plugin_kw: NotRequired[dict[str, Any]]
    micro_batch: NotRequired[int]
    global_batch: NotRequired[int]
    seq: NotRequired[int]
    gpus: NotRequired[int]
    tokens_per_s_per_gpu: NotRequired[int]
    mfu: NotRequired[float]
    mfu_all_params: NotRequired[float]
    peak_gib: NotRequired[float]
    loss_last: NotRequired[float | None]
    reference: NotRequired[list[float]]
    max_ref_gap: NotRequired[float | None]
    loss_ok: NotRequired[bool]
    seconds: NotRequired[float | None]
    seconds_per_step: NotRequired[float | None]
    kernels: NotRequired[dict[str, Any] | None]
    sdpa: NotRequired[str | None]  # flagship_levers.row's, from here on
    fused_ce: NotRequired[bool | None]
    compile_scope: NotRequired[str | None]
    compile_mode: NotRequired[str | None]
    recompute_layers: NotRequired[int]
    fp8: NotRequired[str]
    fuse_proj: NotRequired[bool]
    losses: NotRequired[list[float | None] | None]
    ceiling_fraction: NotRequired[float]
    trace: NotRequired[Any]
    memory_snapshot: NotRequired[dict[str, Any] | None]
    matmul_ceiling_tflops: NotRequired[float | None]
    sdpa_ran: NotRequired[str | None]  # the SDPA backends whose kernels the profile names


class Verdict(TypedDict):
    """A head-to-head's row (:func:`helpers.record.flagship_summary.compare`): one contender over
    its rounds."""

    name: str
    rounds: int
    valid: bool
    framework: str | None
    tokens_per_s_per_gpu: list[int]
    median: float | None
    mfu_median: float | None
    mfu_all_params_median: float | None
    spread: float | None
    vs_fsdp2: float | None


class FlagshipRun(RecordedRun):
    """A run of :mod:`helpers.demos.ch08_train` (the flagship's, Chapter 8's and 6's records)."""

    results: list[FrameworkTrainResult]
    summary: NotRequired[RunSummary]
    matmul_ceiling_tflops: NotRequired[float]  # the one-GPU lever records'


class FlagshipRecord(Record):
    """``flagship``, ``flagship_h2h``, ``flagship_levers*``, ``flagship_fp8``, ``ch08_<part>``."""

    runs: list[FlagshipRun]
    part: NotRequired[str]
    matmul_ceiling_tflops: NotRequired[float]
    compare: NotRequired[list[Verdict]]
