"""Divisors: the sizes one parallel axis can take when the others are fixed (Chapters 2 and 4).

Torch-free, so that checking a config file (Chapter 4, "Validating a configuration") imports
neither torch nor Colossal-AI.
"""


def divisors(n: int, cap: int | None = None) -> list[int]:
    """The divisors of ``n`` up to ``cap`` (all of them without one), in increasing order.

    >>> divisors(12), divisors(12, cap=4)
    ([1, 2, 3, 4, 6, 12], [1, 2, 3, 4])
    """
    top = n if cap is None else min(n, cap)
    return [d for d in range(1, top + 1) if n % d == 0]
