"""Chapter 6's demo results (``helpers/demos/ch06_*.py``): other frameworks."""

from typing import Any

from helpers.run.result_types import Emitted


class DeepSpeedResult(Emitted):
    deepspeed: str
    backend: str
    world_size: int
    reference: list[float]
    max_gap: float
    tolerance: float
    runs: list[dict[str, Any]]
