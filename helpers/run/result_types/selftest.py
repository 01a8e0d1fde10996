"""The launcher's own self-test results (``helpers/demos/selftest.py``, Chapter 5)."""

from helpers.run.result_types import Emitted


class SelftestResult(Emitted):
    sum: float
    backend: str
    device: str
    cuda_visible: bool
    out: str | None
    read: str | None


class SelftestPartResult(Emitted):
    index: int
    values: list[int]
