"""Chapter 10's contract for a pitfall demo: what it shows going wrong, the fix, and whether both
did.

Every demo of :mod:`helpers.chapters.ch10_costs`, :mod:`helpers.chapters.ch10_layout_rules`,
:mod:`helpers.chapters.ch10_data_parallel` and :mod:`helpers.chapters.ch10_runs` returns one;
:mod:`helpers.chapters.ch10_pitfalls` loads the pitfalls that name them
(``helpers/data/pitfalls.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shown:
    """What a pitfall demo found: the failure, the corrected result, and whether both showed."""

    wrong: str
    fixed: str
    holds: bool
