"""Chapter 10's pitfalls, loaded from data: each belief, the demo that shows it failing and the
fix, and its table.

The pitfalls are ``helpers/data/pitfalls.yaml`` (fields described there). Each names its demo as
``<module>.<function>``, ``module`` one of :data:`DEMO_MODULES`; every demo returns a
:class:`~helpers.chapters.ch10_shown.Shown`: the numbers that show the belief going wrong, the
numbers after the fix, and ``holds``, True only when the demo really showed the failure *and* the
fix repaired it, which the notebook asserts in the cell. :func:`load` checks every entry and
names the pitfall in every error. Used by ``notebooks/10_pitfalls.ipynb`` and
``tests/test_quiz.py``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from helpers.chapters.ch10_shown import Shown

DATA = Path(__file__).resolve().parent.parent / "data" / "pitfalls.yaml"
BOOK = Path(__file__).resolve().parents[2] / "book"
DEMO_MODULES = {
    "costs": "helpers.chapters.ch10_costs",
    "layout_rules": "helpers.chapters.ch10_layout_rules",
    "data_parallel": "helpers.chapters.ch10_data_parallel",
    "runs": "helpers.chapters.ch10_runs",  # imported on first use: it loads torch's launcher
}
KINDS = ("computed", "recorded", "library", "launched")
FIELDS = ("key", "group", "title", "belief", "chapter", "demo", "kind")


class PitfallError(ValueError):
    """An entry of the pitfalls data that cannot be used, with where it is."""


@dataclass(frozen=True)
class Pitfall:
    key: str
    group: str  # the page's section
    title: str  # the pitfall's heading on the page
    belief: str
    chapter: str  # the book page that explains it, e.g. "03_strategy"
    demo_name: str  # "costs.more_parallelism"
    kind: str  # one of KINDS

    def demo(self) -> Shown:
        """Run the demo: the failure shown, then the fix."""
        module, name = self.demo_name.split(".")
        return getattr(importlib.import_module(DEMO_MODULES[module]), name)()


def _pitfall(entry, where: str) -> Pitfall:
    if not isinstance(entry, dict):
        raise PitfallError(f"{where}: an entry must be a mapping, not {entry!r}")
    where = f"{where} ({entry.get('key', 'no key')})"
    missing = [f for f in FIELDS if not str(entry.get(f, "")).strip()]
    unknown = sorted(set(entry) - set(FIELDS))
    if missing or unknown:
        raise PitfallError(f"{where}: missing {missing} / unknown {unknown}; fields: {FIELDS}")
    if entry["kind"] not in KINDS:
        raise PitfallError(f"{where}: kind {entry['kind']!r} is not one of {KINDS}")
    if not (BOOK / f"{entry['chapter']}.md").is_file():
        raise PitfallError(f"{where}: no chapter page book/{entry['chapter']}.md")
    module, _, name = entry["demo"].partition(".")
    if module not in DEMO_MODULES or not name:
        raise PitfallError(
            f"{where}: demo {entry['demo']!r} is not <module>.<function>, module "
            f"one of {list(DEMO_MODULES)}"
        )
    if module != "runs" and not callable(
        getattr(importlib.import_module(DEMO_MODULES[module]), name, None)
    ):
        raise PitfallError(f"{where}: {DEMO_MODULES[module]} has no function {name!r}")
    fields = {f: entry[f] for f in FIELDS if f != "demo"}
    return Pitfall(demo_name=entry["demo"], **fields)


def load(path: Path = DATA) -> list[Pitfall]:
    """Every pitfall of the file, in its order, checked (a PitfallError says what and where)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if set(data) != {"pitfalls"} or not isinstance(data["pitfalls"], list):
        raise PitfallError(f"{path.name}: the file holds one key, 'pitfalls', a list")
    out = [_pitfall(e, f"{path.name}, pitfall {i}") for i, e in enumerate(data["pitfalls"], 1)]
    keys = [p.key for p in out]
    if len(set(keys)) != len(keys):
        raise PitfallError(
            f"{path.name}: keys used twice: {sorted({k for k in keys if keys.count(k) > 1})}"
        )
    return out


@lru_cache(maxsize=1)
def _all() -> tuple[Pitfall, ...]:
    return tuple(load())


def pitfalls() -> list[Pitfall]:
    return list(_all())


def by_key(key: str) -> Pitfall:
    for p in _all():
        if p.key == key:
            return p
    raise KeyError(f"no pitfall {key!r}; the keys: {[p.key for p in _all()]}")


def overview_rows() -> list[dict]:
    """One row per pitfall for the chapter's overview table."""
    return [
        {"pitfall": p.title, "shown by": p.kind, "explained in": f"Chapter {int(p.chapter[:2])}"}
        for p in _all()
    ]


def show(key: str) -> Shown:
    """Run pitfall ``key``'s demo, display belief / demonstrated / corrected as a table glued as
    ``ch10-<key>`` for the page, and return what it found (the cell asserts ``holds``)."""
    from helpers.notebook.tables import show_table

    pitfall = by_key(key)
    shown = pitfall.demo()
    rows = [
        {"": "belief", "result": pitfall.belief},
        {"": "demonstrated", "result": shown.wrong},
        {"": "corrected", "result": shown.fixed},
    ]
    show_table(rows, ["", "result"], f"ch10-{key}")
    return shown
