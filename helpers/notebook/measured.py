"""Numbers whose last digits depend on the machine, shown so that stored outputs hold everywhere.

torch picks its CPU vector kernels per machine (``torch.backends.cpu.get_cpu_capability()``:
AVX-512, AVX2 or the portable default), and their different rounding moves a 12-epoch accuracy by
tenths of a percent and a loss in its third digit. A notebook therefore prints exactly only what
is exact (counts, booleans, bitwise equalities) and shows the rest through :func:`approx`: the
value with a leading ``≈``, which ``tests/nbval_sanitize.cfg`` masks (rule ``[approx]``), next to
the bound that the same cell asserts (:func:`check`). The README's "Portability" section says how
to try a second kernel path (``make test-portable``).
"""

from __future__ import annotations

from collections.abc import Iterable

MARK = "≈"


def approx(value: float, fmt: str = ".3f", unit: str = "") -> str:
    """``≈93.87 %``: a measured value whose last digits vary between CPUs (masked by nbval)."""
    return f"{MARK}{value:{fmt}}{unit}"


def approx_list(values: Iterable[float], fmt: str = ".4f") -> str:
    """``[≈0.1343, ≈0.1299]``."""
    return "[" + ", ".join(approx(v, fmt) for v in values) + "]"


def check(
    name: str,
    value: float,
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    fmt: str = ".3f",
    unit: str = "",
    scale: float = 1.0,
) -> str:
    """Assert ``at_least <= value <= at_most`` and return the line that states it.

    ``scale`` multiplies value and bounds for display only (e.g. 100 for a fraction shown in %).
    """
    if at_least is None and at_most is None:
        raise ValueError(
            "check() needs at_least, at_most or both: a value without a bound is not a check"
        )
    if at_least is not None and value < at_least:
        raise AssertionError(
            f"{name} = {value:{fmt}}{unit}, below the required {at_least:{fmt}}{unit}"
        )
    if at_most is not None and value > at_most:
        raise AssertionError(
            f"{name} = {value:{fmt}}{unit}, above the allowed {at_most:{fmt}}{unit}"
        )
    bounds = [
        f"≥ {at_least * scale:g}{unit}" if at_least is not None else "",
        f"≤ {at_most * scale:g}{unit}" if at_most is not None else "",
    ]
    return (
        f"{name} {approx(value * scale, fmt, unit)} ({' and '.join(b for b in bounds if b)} "
        "required)"
    )
