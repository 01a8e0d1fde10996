"""One command line for every demo: the shared flags, the GPU guard and the plugins' lifetime.

Every demo (``helpers/demos``) and every library parser a recorder replays builds its
``argparse`` parser here; :func:`demo_parser` finds a replayed demo's parser by the demo's name.
A flag that several demos take (``--seed``, ``--tp``, ``--zero``, ``--lr``, ...) is declared
once in :data:`FLAGS`; a demo adds it with :func:`add` and passes its own default, so the
defaults that differ from demo to demo stay visible where they are used.

:func:`require_gpu` stops a rank that the launcher placed on the CPU when the demo needs CUDA,
naming the launcher's rule (Chapter 1, "Where the ranks run"). :func:`plugin_lifetime` keeps
Colossal-AI plugins alive until a demo's results are out and then destroys their process groups,
inside :func:`helpers.run.env.distributed`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from typing import Callable, Iterator

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


# the library module whose ``parser()`` is a demo's command line, for the demos whose run lists
# the recorders replay: a recorder or test checks its flags without importing the demo
PARSERS = {
    "ch05_train": "helpers.train.run_config",
    "ch07_memory": "helpers.train.layout_step",
    "ch08_train": "helpers.train.framework_run",
    "ch09_hybrid": "helpers.train.benchmark",
    "ch09_mixtral": "helpers.train.moe_plugin",
    "ch09_resnet_train": "helpers.train.resnet",
    "ch09_sp_sweep": "helpers.train.seq_sweep",
}


def demo_parser(demo: str) -> argparse.ArgumentParser:
    """The command line of ``helpers.demos.<demo>`` (one of :data:`PARSERS`)."""
    return importlib.import_module(PARSERS[demo]).parser()


def parser(doc: str | None = None, prog: str | None = None) -> argparse.ArgumentParser:
    """A parser described by the first line of ``doc`` (a demo's docstring), if given."""
    return argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0] if doc else None)


def add(p: argparse.ArgumentParser, name: str, default=None, **override) -> None:
    """Add the shared flag ``--name`` with this demo's ``default``; ``override`` replaces any of
    :data:`FLAGS`' keywords (a demo's own help text or narrower choices)."""
    spec = dict(FLAGS[name])
    if name == "precision":
        from helpers.parallel.vocab import DTYPES

        spec["choices"] = list(DTYPES)
    spec.update(override)
    p.add_argument(f"--{name}", default=default, **spec)


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
