"""One command line for every demo: the shared flags, the GPU guard and the plugins' lifetime.

Every demo (``helpers/demos``) and every library parser a recorder replays builds its
``argparse`` parser here (:func:`helpers.record.runner.demo_parser` finds a replayed demo's parser
by the demo's name).
A flag that several demos take (``--seed``, ``--tp``, ``--zero``, ``--lr``, ...) is declared
once in :data:`FLAGS`; a demo adds it with :func:`add` and passes its own default, so the
defaults that differ from demo to demo stay visible where they are used.

:func:`require_gpu` stops a rank that the launcher placed on the CPU when the demo needs CUDA,
naming the launcher's rule (Chapter 1, "Where the ranks run"). :func:`plugin_lifetime` keeps
Colossal-AI plugins alive until a demo's results are out and then destroys their process groups,
inside :func:`helpers.run.env.distributed`.

:func:`check_launch` checks what a notebook hands :func:`helpers.run.launch.launch` before
anything starts (:func:`count`, :func:`seconds`, :func:`folder`): ``torchrun`` writes
``--nproc_per_node=2.5`` into its command line as it is and fails only after starting, a string
``"2"`` meets ``nproc < 1`` as a TypeError, and a negative timeout would start the ranks and
report them past it at once.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import importlib
import importlib.util
import math
import numbers
import os
import pkgutil
from pathlib import Path
from typing import Any, Callable, Iterator

from helpers.parallel import vocab
from helpers.parallel.vocab import SP_MODES

SEED = 0  # every demo's default seed

# name -> argparse keywords (everything but the default); choices of "precision" are DTYPES'
FLAGS: dict[str, dict] = {
    "seed": dict(type=int),
    "tp": dict(type=int, help="tensor-parallel size"),
    "pp": dict(type=int, help="pipeline stages"),
    "sp": dict(type=int, help="sequence-parallel size"),
    "sp_mode": dict(choices=list(SP_MODES), help="sequence-parallel mode"),
    "zero": dict(type=int, help="ZeRO stage"),
    "microbatches": dict(type=int, help="pipeline micro-batches (pp > 1)"),
    "precision": dict(help="parameter and activation precision"),
    "lr": dict(type=float, help="learning rate"),
    "steps": dict(type=int),
    "warmup": dict(type=int, help="untimed first steps"),
    "ref_steps": dict(type=int, help="steps compared with the single-GPU reference"),
    "batch": dict(type=int, help="global batch (sequences per step)"),
    "seq": dict(type=int, help="sequence length"),
    "layers": dict(type=int),
    "hidden": dict(type=int),
    "timeout_s": dict(type=float, help="process-group timeout (s)"),
}


def parser(doc: str | None = None, prog: str | None = None) -> argparse.ArgumentParser:
    """A parser described by the first line of ``doc`` (a demo's docstring), if given."""
    return argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0] if doc else None)


def add(p: argparse.ArgumentParser, name: str, default=None, **override) -> None:
    """Add the shared flag ``--name`` with this demo's ``default``; ``override`` replaces any of
    :data:`FLAGS`' keywords (a demo's own help text or narrower choices)."""
    spec = dict(FLAGS[name])
    if name == "precision":
        spec["choices"] = list(vocab.DTYPES)  # built (with torch) on first use
    spec.update(override)
    p.add_argument(f"--{name}", default=default, **spec)


def add_layout(p: argparse.ArgumentParser, layout_class) -> None:
    """One flag per field of a layout dataclass (:class:`helpers.parallel.train_layout.TrainLayout`)
    with its default; a ``shape`` field travels as the flags of its ``shape_flags``; a shared flag
    keeps its declaration in :data:`FLAGS`."""
    default = layout_class()
    for f in dataclasses.fields(layout_class):
        value = getattr(default, f.name)
        if f.name == "shape":
            for k in layout_class.shape_flags:
                shape_default = None if k == "ffn" else getattr(value, k)
                if k in FLAGS:
                    add(p, k, shape_default)
                else:
                    p.add_argument(f"--{k}", type=int, default=shape_default)
        elif f.name in FLAGS:
            add(p, f.name, value)
        elif isinstance(value, bool):
            p.add_argument(f"--{f.name}", action="store_true")
        else:
            p.add_argument(f"--{f.name}", type=type(value), default=value)


def add_all(p: argparse.ArgumentParser, **defaults) -> None:
    """:func:`add` for each ``name=default``, in the order given."""
    for name, default in defaults.items():
        add(p, name, default)


def require_gpu(env, what: str, instead: str = "") -> None:
    """Stop this rank unless it runs on a CUDA GPU: ``what`` needs one per rank.

    The launcher, not the demo, decides where ranks run (Chapter 1, "Where the ranks run"):
    R ranks get one GPU each only on a machine with at least R GPUs; otherwise, or with
    ``BOOK_BACKEND=gloo``, they run on the CPU with gloo. ``instead``: what does run on the CPU.
    """
    if env.is_gpu:
        return
    raise SystemExit(
        f"{what} needs one CUDA GPU per rank in Colossal-AI 0.5.0, but the launcher put these "
        f"{env.world_size} ranks on the CPU (gloo): R ranks run on GPUs only where there are at "
        'least R of them (Chapter 1, "Where the ranks run")' + (f"; {instead}" if instead else "")
    )


@contextlib.contextmanager
def plugin_lifetime() -> Iterator[Callable]:
    """``with plugin_lifetime() as keep: plugin = keep(make_plugin(...)) ...``: a plugin lives to
    the end of the block, then its process groups go, the newest plugin's first.

    A Colossal-AI plugin's ``__del__`` destroys the process groups it made (HybridParallelPlugin's
    and GeminiPlugin's ``pg_mesh``), and every rank must do that at the same point. Leaving it to
    the garbage collector runs it wherever the last reference dies, possibly after
    :func:`helpers.run.env.distributed` has destroyed the default group; here it runs when the
    block ends normally, after the demo's results are out. A later ``__del__`` finds the groups
    gone and does nothing.
    """
    held: list = []

    def keep(plugin):
        held.append(plugin)
        return plugin

    yield keep
    while held:
        release = getattr(held.pop(), "__del__", None)
        if release is not None:
            release()


def _refuse(name: str, value: Any, allowed: str, example: str, kind: type | None) -> ValueError:
    """``name must be allowed, got value (its type when it is the wrong one); e.g. example``."""
    kind_name = type(value).__name__
    wrong = f" (a{'n' * (kind_name[0] in 'aeiou')} {kind_name})"
    wrong = "" if kind is None or isinstance(value, kind) and not isinstance(value, bool) else wrong
    return ValueError(f"{name} must be {allowed}, got {value!r}{wrong}; e.g. {example}")


def count(name: str, value: Any, least: int = 1, what: str = "processes") -> int:
    """``value`` if it is a whole number ≥ ``least`` (an int, not a bool or a float), else a
    ValueError naming the argument, the value and what is allowed."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        digits = isinstance(value, str) and value.strip().isdigit() and int(value) >= least
        example = f"{name}={int(value) if digits else max(least, 2)}"
        integral = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        whole = "" if integral else "a whole number, "
        allowed = f"{whole}at least {least} ({what})"
        raise _refuse(name, value, allowed, example, numbers.Integral)
    return int(value)


def seconds(name: str, value: Any) -> float:
    """``value`` if it is a finite number of seconds > 0, else a ValueError (NaN compares false
    with every elapsed time, so a NaN timeout would never fire)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise _refuse(name, value, "a finite number of seconds > 0", f"{name}=600", numbers.Real)
    return float(value)


def folder(name: str, value: Any) -> Path:
    """``value`` as a Path if it names a folder (or none yet), else a ValueError."""
    if not isinstance(value, (str, os.PathLike)) or not str(value) or "\x00" in str(value):
        raise _refuse(name, value, "a folder (a non-empty str or Path)", f"{name}='/tmp/x'", None)
    if Path(value).exists() and not Path(value).is_dir():
        raise ValueError(f"{name} must be a folder, got {str(value)!r}, which is a file")
    return Path(value)


def check_launch(demo: Any, nproc: Any, args: Any, timeout_s: Any, env: Any) -> None:
    """What :func:`helpers.run.launch.launch` is given, checked before anything starts: the demo
    exists, ``nproc`` is a count, ``args`` a list (a string would be split into characters),
    ``timeout_s`` a time and ``env`` a mapping of strings."""
    if not isinstance(demo, str) or not demo:
        raise _refuse("demo", demo, "a demo's name (a non-empty str)", "demo='ch01_dp'", str)
    module = demo if demo.startswith("helpers.") else f"helpers.demos.{demo}"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package that does not exist, or "a..b"
        spec = None
    if spec is None:
        demos = importlib.import_module("helpers.demos").__path__
        close = difflib.get_close_matches(demo, [m.name for m in pkgutil.iter_modules(demos)], 2)
        raise ValueError(
            f"demo must name a module of helpers/demos, got {demo!r}: no module {module}"
            + (f"; did you mean {' or '.join(map(repr, close))}?" if close else "")
        )
    count("nproc", nproc, what="ranks on this machine")
    if isinstance(args, (str, bytes)) or not isinstance(args, (list, tuple)):
        raise _refuse("args", args, "a list (a str would be split into characters)",
                      "args=['--steps', '3']", None)  # fmt: skip
    seconds("timeout_s", timeout_s)
    if env is not None and (
        not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values())
    ):
        bad = (
            {k: v for k, v in env.items() if not isinstance(v, str)}
            if isinstance(env, dict)
            else env
        )
        raise _refuse("env", bad, "a dict of str to str", "env={'X': '1'}", None)
