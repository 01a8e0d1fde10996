"""Measured results with their provenance, under ``results/<hardware>/<name>.json``.

Used by every chapter that shows a GPU number. Only code writes these files: a run on the GPU
box calls :func:`save`, and a CPU notebook calls :func:`load` (or :func:`recorded`, None when
absent) to show what was measured, with the hardware, date, versions and the command that
produced it. ``load(name, gpus=1)`` (or
``hardware=...``) asks for one machine's record: the one-GPU records (results/1x<GPU>/, made by the
recorders' ``--gpus 1`` for a one-GPU reader) sit beside the 2-GPU ones under the same names, and a
plain ``load(name)`` returns them only when no record with more GPUs exists.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

import torch

from helpers.record.commands import spelled_today
from helpers.run.result_types.records import Provenance, Record

RESULTS_DIR = Path(__file__).resolve().parents[2] / "results"


def hardware() -> str:
    """A short name of this machine's accelerators, e.g. '2xNVIDIA-H200' or 'cpu'."""
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n == 0:
        return "cpu"
    return f"{n}x{torch.cuda.get_device_name(0).replace(' ', '-')}"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def _git_commit() -> str:
    if os.environ.get("BOOK_GIT_COMMIT"):  # the GPU box receives a tree without .git
        return os.environ["BOOK_GIT_COMMIT"]
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            cwd=RESULTS_DIR.parent,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _git_dirty() -> bool | None:
    """Whether the tree that ran differs from its commit (tracked changes or untracked files), or
    None where that cannot be told (``BOOK_GIT_COMMIT`` given, no git). A device copy can carry a
    stale ``.git``: its HEAD then names an older commit, and this says the code was not that."""
    if os.environ.get("BOOK_GIT_COMMIT"):
        return None
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=normal", "--", "helpers"],
            capture_output=True,
            text=True,
            cwd=RESULTS_DIR.parent,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return bool(out.strip())


def provenance(command: str) -> Provenance:
    """Where, when and with what a result was measured."""
    return {
        "hardware": hardware(),
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available()
        else [],
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda or "none",
            "colossalai": _version("colossalai"),
            "transformers": _version("transformers"),
        },
        "command": command,
        "git_commit": _git_commit(),
        "git_dirty": _git_dirty(),
    }


def save(
    name: str,
    runs: list[dict],
    command: str,
    copy_to: str | Path | None = None,
    extra: dict | None = None,
) -> Path:
    """Write ``runs`` with provenance (and ``extra`` top-level fields) to
    results/<hardware>/<name>.json and return the path.

    ``copy_to``: also write it to ``copy_to``/<hardware>/ (a lent device's $OUT, so that what a
    command killed at its time limit had saved still comes back). Each file is written whole and
    then renamed, so a reader in another process never sees half a record."""
    path = RESULTS_DIR / hardware() / f"{name}.json"
    text = (
        json.dumps({"provenance": provenance(command), "runs": runs, **(extra or {})}, indent=2)
        + "\n"
    )
    for target in [path] + ([Path(copy_to) / path.parent.name / path.name] if copy_to else []):
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(target)
    return path


def gpus_in(hardware_name: str) -> int | None:
    """The number of GPUs a hardware folder's name says: '2xNVIDIA-H200' -> 2, 'cpu' -> 0, else
    None."""
    if hardware_name == "cpu":
        return 0
    found = re.match(r"(\d+)x", hardware_name)
    return int(found.group(1)) if found else None


def _folders(name: str, hardware: str | None, gpus: int | None) -> list[Path]:
    found = [p for p in RESULTS_DIR.glob(f"*/{name}.json") if p.parent.name != "cpu"]
    if hardware is not None:
        found = [p for p in found if p.parent.name == hardware]
    if gpus is not None:
        found = [p for p in found if gpus_in(p.parent.name) == gpus]
    elif (
        hardware is None
    ):  # one-GPU records are the one-GPU reader's copies: asked for, or the only ones
        found = [p for p in found if gpus_in(p.parent.name) != 1] or found
    return found


def load(name: str, hardware: str | None = None, gpus: int | None = None) -> Record:
    """The most recent GPU record called ``name`` (any hardware folder but 'cpu').

    ``hardware`` (a folder name, e.g. '2xNVIDIA-H200') or ``gpus`` (the count the folder's name
    starts with) narrow the search. Without either, a one-GPU record (results/1x.../, made for the
    one-GPU reader beside the 2-GPU one) is returned only when no record with more GPUs exists, so
    that a chapter written for two GPUs keeps reading what it was written for."""
    found = _folders(name, hardware, gpus)
    if not found:
        where = "".join(
            [f" for hardware {hardware}" if hardware else "", f" on {gpus} GPU(s)" if gpus else ""]
        )
        raise FileNotFoundError(
            f"no recorded GPU result '{name}'{where} under {RESULTS_DIR}: "
            f"run the chapter's recording command on a GPU box first"
        )
    records = [json.loads(p.read_text()) for p in found]
    return max(records, key=lambda r: r["provenance"]["date"])


def box_label(record: Record | None, gpus: int) -> str:
    """'1×H200' for a record made in results/1xNVIDIA-H200 (the expected box when there is none)."""
    hardware_name = record["provenance"]["hardware"] if record else f"{gpus}xNVIDIA-H200"
    count, _, device = hardware_name.partition("x")
    return f"{count}×{device.removeprefix('NVIDIA-')}"


def find(name: str, hardware: str | None = None, gpus: int | None = None) -> Record | None:
    """:func:`load`, or None when there is no such record."""
    try:
        return load(name, hardware=hardware, gpus=gpus)
    except FileNotFoundError:
        return None


def recorded(
    name: str, part: str | None = None, gpus: int | None = 2, quick: bool = False
) -> Record | None:
    """The newest record a chapter shows: ``name`` (with ``part``: ``<name>_<part>``, one part of a
    recorder that records in parts) made on ``gpus`` GPUs (default 2, the book's box; 1: the
    one-GPU record of ``--gpus 1``; None: :func:`load`'s choice), or None when there is none.

    ``quick``: failing that, the part's runs of the quick smoke recording (``<name>_quick``, small
    models), marked ``"quick": True`` (Chapter 9's parts)."""
    record = find(f"{name}_{part}" if part else name, gpus=gpus)
    if record is not None or not (quick and part):
        return record
    smoke = find(f"{name}_quick", gpus=gpus)
    runs = [r for r in (smoke or {}).get("runs", []) if r.get("part") == part]
    return {**smoke, "runs": runs, "quick": True} if runs else None


def earlier(name: str) -> Record | None:
    """The record ``name`` already written on this machine's hardware (a partial re-recording keeps
    its runs)."""
    path = RESULTS_DIR / hardware() / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _always(new: dict, old: dict) -> bool:
    return True


def merge_runs(earlier: Record | None, new: list[dict], replaces=_always) -> list[dict]:
    """The earlier record's runs that ``new`` does not replace, each stamped with the provenance it
    was made with, then the new runs. ``replaces(new_run, old_run)`` decides for a name in both
    (default: the new run wins). Used by Chapter 7's and the multi-GPU recorder's ``--only``;
    :func:`carried_over` names the kept recordings."""
    old = {
        r["name"]: {**r, "provenance": r.get("provenance", earlier["provenance"])}
        for r in (earlier or {}).get("runs", [])
    }
    chosen = [r for r in new if r["name"] not in old or replaces(r, old[r["name"]])]
    taken = {r["name"] for r in chosen}
    return [r for name, r in old.items() if name not in taken] + chosen


def describe(record: Record) -> str:
    """One paragraph of provenance for a notebook (plus a line per earlier recording whose runs it
    kept)."""
    p = record["provenance"]
    v = p["versions"]
    return "\n".join(
        [
            f"Recorded on {p['hardware']} on {p['date']} with torch {v['torch']} "
            f"(CUDA {v['cuda']}), Colossal-AI {v['colossalai']}, transformers {v['transformers']}, "
            f"commit {p['git_commit'][:10]}"
            + (" with changes to helpers/ not committed" if p.get("git_dirty") else "")
            + ".",
            f"Command: {p['command']}" + _today(p["command"]),
        ]
        + carried_over(record)
    )


def _today(command: str) -> str:
    today = spelled_today(command)
    return "" if today == command else f" (typed today: {today})"


def carried_over(record: Record) -> list[str]:
    """One line per earlier recording whose runs a partial re-recording kept (commit, date, count).

    A re-recording of some runs (Chapter 7's ``--only``) stamps each kept run with its own
    provenance."""
    groups: dict[tuple, int] = {}
    for r in record.get("runs", []):
        if isinstance(r, dict) and "provenance" in r:
            key = (r["provenance"].get("git_commit", "?")[:10], r["provenance"].get("date", "?"))
            groups[key] = groups.get(key, 0) + 1
    return [
        f"{n} of the {len(record['runs'])} runs were recorded earlier: on {date} at commit {commit}"
        for (commit, date), n in groups.items()
    ]


def format_table(rows: list[dict], columns: list[str]) -> str:
    """A plain-text table; values are printed as given (round them first)."""
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]

    def line(vals: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(vals, widths)).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])
