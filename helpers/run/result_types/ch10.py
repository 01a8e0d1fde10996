"""Chapter 10's demo results (``helpers/demos/ch10_*.py``): pitfalls."""

from helpers.run.result_types import Emitted


class PpLossResult(Emitted):
    stage: int
    last_stage: bool
    local_loss: float
    broadcast_loss: float
    reference_loss: float | None
