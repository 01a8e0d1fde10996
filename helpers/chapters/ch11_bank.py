"""Chapter 11's question bank, loaded from data: the record type, the loader and its checks.

The questions live in ``helpers/data/interview/NN_chapter.yaml``, one file per chapter of the book
they are about (the file's name is the chapter page they link to). Each file is a mapping with one
key, ``questions``, a list of entries:

``id`` (required)
    unique over the bank, e.g. ``c7-zero1``;
``level`` (required)
    one of :data:`LEVELS`;
``question``, ``answer`` (required)
    text; a computed answer contains ``{value}``, where the computed value and its unit go;
``section``
    a heading of the chapter page that explains it (left out: the whole chapter);
``compute``, ``args``
    a named function, ``parallel.<name>`` (:mod:`helpers.chapters.ch11_answers_parallel`) or
    ``cost.<name>`` (:mod:`helpers.chapters.ch11_answers_cost`), and its keyword arguments;
``unit``
    a key of :data:`UNITS`: the function returns base units (bytes, seconds, FLOPs, a fraction)
    and the bank shows the value divided by the unit's size;
``format``
    a Python format spec for the value (default ``.4g``);
``expected``
    the answer key in ``unit``, required with ``compute``; the tests check that the function
    agrees with it, so a change to a helper that moves an answer is caught;
``tolerance``
    how close a reader's answer must be, relative (default 0.02).

:func:`load` checks every entry and names the file and the question in every error: a missing or
unknown field, an unknown level, unit or function, arguments the function does not take, a
duplicate id. Adding a question means adding an entry; it needs no Python.
"""

from __future__ import annotations

import importlib
import inspect
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parent.parent / "data" / "interview"
LEVELS = ("basic", "intermediate", "advanced")
# unit -> its size in base units (bytes, seconds, FLOPs, parameters, a fraction, a count)
UNITS = {
    "": 1.0,
    "GB": 1e9,
    "MB": 1e6,
    "ms": 1e-3,
    "GFLOP": 1e9,
    "billion": 1e9,
    "%": 0.01,
    "×": 1.0,
    "tokens": 1.0,
    "tokens/s": 1.0,
    "elements": 1.0,
}
# the prefix a computed answer names -> the module of its functions
MODULES = {
    "parallel": "helpers.chapters.ch11_answers_parallel",
    "cost": "helpers.chapters.ch11_answers_cost",
}
REQUIRED = ("id", "level", "question", "answer")
OPTIONAL = ("section", "compute", "args", "unit", "format", "expected", "tolerance")


class BankError(ValueError):
    """An entry of the interview data that cannot be used, with where it is."""


@dataclass(frozen=True)
class Question:
    id: str
    chapter: str  # the page that explains it, e.g. "02_combining"
    level: str  # one of LEVELS
    question: str
    answer: str  # worked answer; a computed one contains {value}
    section: str | None = None  # a heading of that page, or None for the whole chapter
    compute: str | None = None  # "parallel.bubble", "cost.mfu", ...
    args: dict = field(default_factory=dict, hash=False)
    unit: str = ""
    format: str = ".4g"
    expected: float | None = None
    tolerance: float = 0.02

    @property
    def numeric(self) -> bool:
        return self.compute is not None

    def value(self) -> float:
        """The computed answer in the question's unit."""
        if self.compute is None:
            raise ValueError(f"{self.id} has no computed answer")
        return float(function(self.compute)(**self.args)) / UNITS[self.unit]

    def value_text(self) -> str:
        return format(self.value(), self.format) + (f" {self.unit}" if self.unit else "")

    def worked(self) -> str:
        return self.answer.replace("{value}", self.value_text()) if self.numeric else self.answer

    def grade(self, given: float) -> bool:
        """True when ``given`` is within ``tolerance`` of the computed answer (or both ~0)."""
        return math.isclose(float(given), self.value(), rel_tol=self.tolerance, abs_tol=1e-12)

    def href(self) -> str:
        """Link to the explaining section, valid from book/ and notebooks/ alike (the page alone
        where docutils, part of the book's toolchain, is not installed)."""
        try:
            from docutils.nodes import make_id  # the anchor Sphinx gives a heading
        except ImportError:
            make_id = None
        anchor = f"#{make_id(self.section)}" if self.section and make_id else ""
        return f"../book/{self.chapter}.html{anchor}"


def functions() -> dict[str, object]:
    """Every function a question may name, by its name in the data (``parallel.bubble``)."""
    found = {}
    for prefix, name in MODULES.items():
        module = importlib.import_module(name)
        for fname, fn in vars(module).items():
            if inspect.isfunction(fn) and fn.__module__ == name and not fname.startswith("_"):
                found[f"{prefix}.{fname}"] = fn
    return found


def function(name: str):
    """The function a question names; a BankError lists the known ones."""
    known = functions()
    if name not in known:
        raise BankError(f"unknown function {name!r}; the known ones: {', '.join(sorted(known))}")
    return known[name]


def _question(entry, chapter: str, where: str) -> Question:
    if not isinstance(entry, dict):
        raise BankError(f"{where}: an entry must be a mapping, not {entry!r}")
    where = f"{where} ({entry.get('id', 'no id')})"
    missing = [k for k in REQUIRED if not str(entry.get(k, "")).strip()]
    unknown = sorted(set(entry) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise BankError(
            f"{where}: missing {missing} / unknown {unknown}; fields: {REQUIRED + OPTIONAL}"
        )
    if entry["level"] not in LEVELS:
        raise BankError(f"{where}: level {entry['level']!r} is not one of {LEVELS}")
    if entry.get("unit", "") not in UNITS:
        raise BankError(f"{where}: unit {entry['unit']!r} is not one of {list(UNITS)}")
    has_value = "{value}" in entry["answer"]
    if "compute" not in entry:
        extra = [k for k in ("args", "unit", "format", "expected", "tolerance") if k in entry]
        if extra or has_value:
            raise BankError(f"{where}: {extra or '{value}'} without a 'compute' function")
    else:
        try:
            inspect.signature(function(entry["compute"])).bind(**entry.get("args", {}))
        except (BankError, TypeError) as err:
            raise BankError(f"{where}: {entry['compute']}: {err}") from None
        if not has_value or "expected" not in entry:
            raise BankError(f"{where}: a computed answer needs {{value}} and an 'expected' key")
        format(1.0, entry.get("format", ".4g"))
    fields = {k: v for k, v in entry.items() if k in OPTIONAL}
    return Question(chapter=chapter, **{k: entry[k] for k in REQUIRED}, **fields)


def load(folder: Path = DATA) -> list[Question]:
    """Every question of every file of ``folder``, checked (a BankError says what and where)."""
    out, seen = [], {}
    for path in sorted(folder.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if set(data) != {"questions"} or not isinstance(data["questions"], list):
            raise BankError(f"{path.name}: a file holds one key, 'questions', a list")
        for i, entry in enumerate(data["questions"], 1):
            q = _question(entry, path.stem, f"{path.name}, question {i}")
            if q.id in seen:
                raise BankError(f"{path.name}: id {q.id!r} is already used in {seen[q.id]}")
            seen[q.id] = path.name
            out.append(q)
    return out


@lru_cache(maxsize=1)
def _bank() -> tuple[Question, ...]:
    qs = load()
    return tuple(sorted(qs, key=lambda q: (q.chapter, LEVELS.index(q.level), q.id)))


def bank() -> list[Question]:
    """Every question, ordered by chapter, then level, then id."""
    return list(_bank())


def chapters() -> list[str]:
    """The chapters the bank has questions on, in the book's order."""
    return sorted({q.chapter for q in _bank()})


def by_id(qid: str) -> Question:
    for q in _bank():
        if q.id == qid:
            return q
    raise KeyError(f"no question {qid!r}")


def counts() -> dict[str, int]:
    qs = _bank()
    return {
        "questions": len(qs),
        "computed": sum(q.numeric for q in qs),
        **{level: sum(q.level == level for q in qs) for level in LEVELS},
    }
