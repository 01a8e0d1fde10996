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


class FlagshipRun(RecordedRun):
    """A run of :mod:`helpers.demos.ch08_train` (the flagship's, Chapter 8's and 6's records)."""

    results: list[FrameworkTrainResult]
    matmul_ceiling_tflops: NotRequired[float]  # the one-GPU lever records'


class FlagshipRecord(Record):
    """``flagship``, ``flagship_h2h``, ``flagship_levers*``, ``flagship_fp8``, ``ch08_<part>``."""

    runs: list[FlagshipRun]
    part: NotRequired[str]
    matmul_ceiling_tflops: NotRequired[float]
    compare: NotRequired[Any]
