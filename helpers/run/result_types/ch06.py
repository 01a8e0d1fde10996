"""Chapter 6's demo results (``helpers/demos/ch06_*.py``): other frameworks."""

from typing import TypedDict

from helpers.run.result_types import Emitted


class DeepSpeedHeld(TypedDict):
    """What one rank keeps after training (:func:`helpers.train.deepspeed_run.held`), elements."""

    params: int
    live: int
    partition: int
    persistent: int
    tensors: int
    adam_state: int


class DeepSpeedRun(TypedDict):
    """One ZeRO stage's run on one rank."""

    name: str
    stage: int
    json: str  # the DeepSpeed JSON the run was given
    schema: str  # what the book's schema says of the YAML at this stage ("" if it accepts it)
    losses: list[float]
    held: DeepSpeedHeld
    calls: dict[str, int]  # collective -> calls over the steps
    elements: dict[str, int]  # collective -> elements sent


class DeepSpeedResult(Emitted):
    deepspeed: str
    backend: str
    world_size: int
    reference: list[float]
    max_gap: float
    tolerance: float
    runs: list[DeepSpeedRun]
