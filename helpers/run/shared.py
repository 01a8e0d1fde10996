"""Launches shared within one test run: the same demo run is made once and read by all who ask.

``make test`` runs the pytest tests and then every notebook, and often a notebook launches exactly
the demo a test has just launched. With ``BOOK_SHARED_RUNS`` naming a folder (``make test`` makes a
fresh one per run), :func:`helpers.run.launch.launch` stores each successful launch there and
answers a later identical launch from it, printing what the first one printed. Without the
variable (a reader running a notebook, ``make book EXECUTE=1``) every launch runs.

A launch is shared only when nothing but its command decides its result:

- the key is the demo, the number of ranks, every argument, and the environment the ranks get
  from the launcher's placement rule (Chapter 1, "Where the ranks run") and from the caller;
- an argument that names a file is an input: its content goes into the key, not its name;
- an argument that names an empty or missing folder (in an existing parent) is an output: the
  key holds only that it was empty, what the run left there is stored with it, and a replay
  copies it into the new caller's folder and writes that folder's name wherever the first run's
  lines and results named its own;
- an argument that names a folder with something in it (a checkpoint to resume from is state on
  disk) makes the launch private, and so does ``share=False`` (a test that runs a command twice to
  compare the two runs must really run it twice);
- failures and timeouts are never stored;
- while a launch runs, an identical one waits for it (:func:`claimed`), as :func:`once` does.

Every launch appends one line to ``log.jsonl`` in the folder; :func:`summary` reads it back.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from helpers.run.env import is_result

ENV = "BOOK_SHARED_RUNS"
# The caller's environment variables that can change what a rank computes or where it runs: the
# book's own (BOOK_*, DATA: a demo's data folder), the CPU kernel path, threads, and the
# libraries' switches.
_DECIDING = (
    "BOOK_",
    "DATA",
    "ATEN_",
    "ONEDNN_",
    "MKL_",
    "OMP_",
    "CUDA_",
    "NCCL_",
    "GLOO_",
    "TORCH",
)
# Set by `import colossalai` in the caller (colossalai/initialize.py:10) for CUDA stream order:
# it changes no value a rank computes, so a test that imports Colossal-AI and a notebook that
# does not still share a launch.
# Inductor's cache folder: torch sets it in any process that compiles (cache_dir_utils.cache_dir),
# and Chapter 8's levers point it at a folder per SDPA setting; where compiled code is kept changes
# no value a rank computes, so a test that compiled in-process still shares the notebooks' launches.
_NOT_DECIDING = {"CUDA_DEVICE_MAX_CONNECTIONS", "TORCHINDUCTOR_CACHE_DIR"}


def _deciding() -> dict[str, str]:
    """The caller's environment variables that go into a key (see :data:`_DECIDING`)."""
    return {
        name: value
        for name, value in os.environ.items()
        if name.startswith(_DECIDING) and name != ENV and name not in _NOT_DECIDING
    }


def folder() -> Path | None:
    """The run's shared folder, or None when sharing is off."""
    value = os.environ.get(ENV)
    return Path(value) if value else None


def _names_a_path(arg: str) -> bool:
    return os.sep in arg or Path(arg).exists()


@dataclass
class Plan:
    """A shareable launch: its key and the output folders its arguments name, as given."""

    key: str
    outputs: list[str] = field(default_factory=list)


def _view(arg: str, outputs: list[str]) -> str | None:
    """What the key holds for one argument (None: the launch must run privately)."""
    if not _names_a_path(arg):
        return arg
    path = Path(arg)
    if path.is_file():
        return "<file " + hashlib.sha256(path.read_bytes()).hexdigest()[:16] + ">"
    if path.is_dir() and not any(path.iterdir()) or not path.exists() and path.parent.is_dir():
        outputs.append(arg)
        return "<empty folder>"
    return None if path.exists() else arg  # a folder with state; or a value that holds a "/"


def plan(demo: str, nproc: int, args: list[str], env: dict[str, str]) -> Plan | None:
    """The launch's key and output folders, or None when it must run privately (sharing off, or
    a folder with something in it).

    ``env`` is what the launcher adds to the ranks' environment (placement and the caller's
    ``env=``); the deciding variables of this process's environment are added here.
    """
    if folder() is None:
        return None
    outputs: list[str] = []
    views = [_view(a, outputs) for a in args]
    if None in views:
        return None
    material = json.dumps([demo, nproc, views, env, _deciding()], sort_keys=True)
    return Plan(hashlib.sha256(material.encode()).hexdigest()[:24], outputs)


def _saved(k: str, i: int) -> Path:
    return folder() / f"{k}.out" / str(i)


def _literal(path: str) -> str:
    """``path`` as it stands inside a JSON string, escaped for :func:`re.sub`'s replacement."""
    return json.dumps(path)[1:-1].replace("\\", "\\\\")


@contextlib.contextmanager
def claimed(p: Plan | None):
    """Hold ``p``'s key while its launch runs (no-op for a private launch): an identical launch
    asked for meanwhile (the other pytest-xdist worker) waits, then is answered from the stored
    run instead of running too; after a failure, which is never stored, it runs itself."""
    if p is None:
        yield
        return
    with open(folder() / f"{p.key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def load(p: Plan) -> dict | None:
    """The stored launch of ``p`` (fields of :class:`helpers.run.launch.LaunchResult`), its output
    folders copied into ``p.outputs`` and their names written in its lines and results."""
    path = folder() / f"{p.key}.json"
    if not path.is_file():
        return None
    text = path.read_text()
    stored = json.loads(text)
    for i, (was, now) in enumerate(zip(stored.pop("outputs"), p.outputs)):
        if _saved(p.key, i).exists():
            shutil.copytree(_saved(p.key, i), now, dirs_exist_ok=True)
        text = re.sub(re.escape(json.dumps(was)[1:-1]) + r"(?![\w.-])", _literal(now), text)
    stored = json.loads(text)
    stored.pop("outputs")
    stored["lines"] = {int(rank): lines for rank, lines in stored["lines"].items()}
    return stored


def store(p: Plan, launched: dict) -> None:
    """Keep a successful launch and what it left in its output folders (written whole, then
    renamed into place)."""
    for i, out in enumerate(p.outputs):
        if Path(out).is_dir():
            shutil.copytree(out, _saved(p.key, i), dirs_exist_ok=True)
    path = folder() / f"{p.key}.json"
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**launched, "outputs": p.outputs}))
    tmp.replace(path)


def keep(p: Plan | None, launched: dict, args: list[str] = ()) -> None:
    """After a successful launch: store it under its plan (None: a private run) and log it."""
    if p is not None:
        store(p, launched)
    outcome = "ran" if p else "private"
    log(launched["demo"], launched["nproc"], launched["seconds"], outcome, args)


def replay(stored: dict, show: str, args: list[str] = ()) -> None:
    """Print what the stored launch printed live: rank 0's lines (``show="rank0"``), then "✓"."""
    if show == "rank0":
        for text in stored["lines"].get(0, []):
            if not is_result(text):
                print(text, flush=True)
    if show != "none":
        print(f"✓ {stored['demo']} on {stored['nproc']} rank(s) in {stored['seconds']:.1f} s")
    log(stored["demo"], stored["nproc"], stored["seconds"], "reused", args)


def log(demo: str, nproc: int, seconds: float, outcome: str, args: list[str] = ()) -> None:
    """One line per launch: ``outcome`` is "ran", "reused" or "private"; with its arguments and
    the pytest item that asked (``caller``), so launches that differ only slightly can be found
    and made one."""
    where = folder()
    if where is None:
        return
    entry = {"demo": demo, "nproc": nproc, "seconds": round(seconds, 2), "outcome": outcome}
    entry |= {"args": list(args), "caller": os.environ.get("PYTEST_CURRENT_TEST", "")}
    with open(where / "log.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


def summary(where: Path | None = None) -> str:
    """How many launches ran, were reused and were private, and the seconds reuse saved."""
    where = where or folder()
    path = where / "log.jsonl" if where else None
    if path is None or not path.is_file():
        return "shared runs: none logged"
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    count = {o: sum(e["outcome"] == o for e in entries) for o in ("ran", "reused", "private")}
    saved = sum(e["seconds"] for e in entries if e["outcome"] == "reused")
    spent = sum(e["seconds"] for e in entries if e["outcome"] != "reused")
    return (
        f"shared runs: {len(entries)} launches, {count['ran']} ran and stored, "
        f"{count['reused']} reused (saving {saved:.0f} s), {count['private']} private; "
        f"{spent:.0f} s spent in launches"
    )


def once(name: str, compute, *material) -> dict:
    """``compute()``'s result (a JSON-able dict), made once per test run for every caller that
    asks with the same ``name`` and ``material`` (and the same deciding environment), as a
    launch is: for runs bigger than one launch, such as Chapter 5's multi-node jobs. Without
    sharing, or when the stored copy is missing, it runs."""
    import time

    if folder() is None:
        return compute()
    blob = json.dumps([name, list(material), _deciding()], sort_keys=True, default=str)
    path = folder() / f"once-{hashlib.sha256(blob.encode()).hexdigest()[:24]}.json"
    # a caller that asks while another computes the same run waits for it (pytest-xdist runs a
    # test file and a notebook that show the same run at the same time)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            stored = json.loads(path.read_text())
            log(name, 0, stored["seconds"], "reused", [str(m) for m in material])
            return stored["result"]
        start = time.monotonic()
        result = compute()
        seconds = time.monotonic() - start
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"seconds": seconds, "result": result}))
        tmp.replace(path)
    log(name, 0, seconds, "ran", [str(m) for m in material])
    return result


if __name__ == "__main__":  # python -m helpers.run.shared FOLDER: the summary of a finished run
    import sys

    print(summary(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
