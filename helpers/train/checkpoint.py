"""Resumable checkpoints through a Colossal-AI Booster: weights, optimizer, scheduler, step, RNG,
data.

Used by Chapter 5's entry point (``helpers.demos.ch05_train``). One checkpoint is one directory::

    <checkpoint_dir>/step_00000006/
        model.pt           booster.save_model        (a folder of shards when sharded)
        optimizer.pt       booster.save_optimizer    (a folder of shards when sharded)
        lr_scheduler.pt    booster.save_lr_scheduler
        rank00000.pt ...   one per rank: RNG states (python, numpy, torch CPU, CUDA), data position
        meta.json          step, world layout, data position, losses so far, versions

Atomic (:mod:`helpers.train.atomic`): every rank writes into ``.tmp-step_00000006/``; after a
barrier (Colossal-AI's ``save_*`` calls end without one) rank 0 writes ``meta.json`` last and
renames the folder, so a directory called ``step_*`` is always complete and :func:`latest`
ignores what a rank killed mid-save leaves. With ``keep_last=k`` only the newest k checkpoints
stay, deleted *after* the new one is published (:func:`prune`). With several nodes the folder
must be on a file system every node sees (NFS, Lustre, ...), as sharded checkpoints require.

Resuming bit for bit needs the same layout: each rank's RNG stream and its slice of every global
batch depend on it, so :func:`load` refuses a checkpoint from a different layout and says why.
``reshard=True`` relaxes that to what still continues the *same* run (global batch and seed):
Colossal-AI's sharded checkpoints hold full tensors, so another tensor/pipeline/data split loads
them; the ranks are then re-seeded from ``(seed, step, rank)`` and the run continues, correctly
but not identically.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DistributedSampler

from helpers.train.atomic import TMP_PREFIX, atomic_dir, write_json_atomic
from helpers.train.atomic import barrier, fsync_dir, this_rank
from helpers.train.faults import die

STEP_DIR = re.compile(r"^step_(\d{8})$")


def step_dir(root: str | os.PathLike, step: int) -> Path:
    return Path(root) / f"step_{step:08d}"


def latest(root: str | os.PathLike) -> Path | None:
    """The complete checkpoint with the highest step under ``root`` (``.tmp-*`` folders never
    count)."""
    root = Path(root)
    if not root.is_dir():
        return None
    found = [
        (int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name))
    ]
    return max(found)[1] if found else None


def rng_state() -> dict:
    """Every random stream a training step may draw from, on this rank."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # this rank's own device only
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


@dataclass
class DataPosition:
    """Where the data stream stands: epoch, batches taken in it, samples seen by the world."""

    epoch: int = 0
    batch_in_epoch: int = 0
    samples_seen: int = 0


class ResumableSampler(DistributedSampler):
    """``DistributedSampler`` that can start part-way through an epoch.

    The order of an epoch depends only on ``(seed, epoch)`` and the number of replicas, so skipping
    the first ``start`` indices of this rank's share reproduces exactly what an uninterrupted run
    would have drawn next. Pass it as
    ``plugin.prepare_dataloader(..., distributed_sampler_cls=...)``.
    """

    start = 0

    def set_position(self, epoch: int, start: int) -> None:
        self.set_epoch(epoch)
        self.start = start

    def __iter__(self):
        indices = list(super().__iter__())[self.start :]
        self.start = 0  # only the first epoch after a resume is partial
        return iter(indices)

    def __len__(self) -> int:
        return self.num_samples - self.start


@dataclass
class Resumed:
    """What :func:`load` hands back to the training loop."""

    path: Path
    step: int
    data: DataPosition
    losses: list[float] = field(default_factory=list)
    meta: dict = field(default_factory=dict)


def _rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank:05d}.pt"


def save(
    booster,
    model,
    optimizer,
    scheduler,
    root: str | os.PathLike,
    step: int,
    data: DataPosition,
    layout: dict,
    losses: list[float],
    shard: bool = False,
    extra: dict | None = None,
    kill_rank: int | None = None,
    keep_last: int | None = None,
) -> Path:
    """Save everything needed to continue after ``step`` completed steps; returns the final folder.

    ``keep_last``: after publishing, delete all but the newest k checkpoints (:func:`prune`).
    ``layout`` (world size, data-parallel size, ...) is stored and checked on load. ``kill_rank``
    is the fault demo's hook: that rank SIGKILLs itself after writing its own files, before the
    rename, to show that an interrupted save never becomes a checkpoint.
    """
    rank = this_rank()
    final = step_dir(root, step)
    with atomic_dir(final) as tmp:
        booster.save_model(model, str(tmp / ("model" if shard else "model.pt")), shard=shard)
        booster.save_optimizer(
            optimizer, str(tmp / ("optimizer" if shard else "optimizer.pt")), shard=shard
        )
        if scheduler is not None:
            booster.save_lr_scheduler(scheduler, str(tmp / "lr_scheduler.pt"))
        torch.save({"rng": rng_state(), "data": vars(data)}, _rank_file(tmp, rank))
        if kill_rank == rank:
            die(f"rank {rank} killed while saving step {step}")
        barrier()  # save_* ends without a barrier: rank 0 writes meta.json only when all are done
        if rank == 0:
            import colossalai

            meta = {
                "step": step,
                "layout": layout,
                "data": vars(data),
                "losses": list(losses),
                "shard": shard,
                "saved_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                "versions": {"torch": torch.__version__, "colossalai": colossalai.__version__},
                **(extra or {}),
            }
            write_json_atomic(tmp / "meta.json", meta)
    if keep_last is not None and this_rank() == 0:
        prune(root, keep_last, protect=final)
    return final


def prune(root: str | os.PathLike, keep_last: int, protect: Path | None = None) -> list[Path]:
    """Delete complete checkpoints under ``root`` except the ``keep_last`` highest steps and
    ``protect`` (the one just written, even if an earlier run left higher steps behind); returns
    what was deleted. Each is first renamed to ``.tmp-old-*``, so a crash mid-delete never leaves a
    ``step_*`` folder that looks complete but is not."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, got {keep_last}")
    root = Path(root)
    found = sorted(
        (int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name))
    )
    doomed = [
        p
        for _, p in found[:-keep_last]
        if protect is None or p.resolve() != Path(protect).resolve()
    ]
    for path in doomed:
        trash = path.with_name(TMP_PREFIX + "old-" + path.name)
        os.replace(path, trash)
        shutil.rmtree(trash, ignore_errors=True)
    if doomed:
        fsync_dir(root)
    return doomed


class IncompatibleCheckpoint(RuntimeError):
    """The checkpoint was written by a run with a different world layout."""


def read_meta(path: str | os.PathLike) -> dict:
    meta = Path(path) / "meta.json"
    if not meta.is_file():
        raise FileNotFoundError(f"{path} is not a complete checkpoint (no meta.json)")
    return json.loads(meta.read_text())


# What may change when resuming with reshard=True: how the same global batch is split over ranks.
RESHARDABLE = ("world_size", "data", "tensor", "pipeline", "sequence", "micro_batch")


def check_layout(saved: dict, now: dict, path: Path, reshard: bool = False) -> None:
    """Refuse to resume when the saved layout differs in a way that changes the run.

    With ``reshard`` only the global batch size and the seed must match (see the module notes)."""
    diffs = {k: (saved.get(k), now[k]) for k in now if saved.get(k) != now[k]}
    if reshard:
        fixed = {k: v for k, v in diffs.items() if k not in RESHARDABLE}
        if fixed:
            listed = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in sorted(fixed.items()))
            raise IncompatibleCheckpoint(
                f"cannot reshard {path.name}: {listed}. A resumed run must keep the global "
                "batch size "
                "and the seed, or it is a different run; only the split over ranks may change."
            )
        return
    if diffs:
        listed = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in sorted(diffs.items()))
        raise IncompatibleCheckpoint(
            f"cannot resume {path.name}: it was saved with a different layout ({listed}). "
            "Each rank's RNG stream and its slice of every global batch depend on the "
            "data-parallel "
            "size, so this run would not continue the saved one. Relaunch with the saved layout "
            f"({saved.get('world_size')} processes in all), or pass --reshard to continue the same "
            "run (same global batch and seed) under the new layout, not bit for bit."
        )


def load(
    booster,
    model,
    optimizer,
    scheduler,
    path: str | os.PathLike,
    layout: dict,
    reshard: bool = False,
) -> Resumed:
    """Restore a checkpoint written by :func:`save` on every rank; the caller's RNG is replaced.

    Under another layout (``reshard``) the saved per-rank RNG states belong to other ranks: each
    rank is re-seeded from ``(seed, step, rank)`` instead and the data position is the saved one."""
    # [start: resume]
    path = Path(path)
    barrier()  # a checkpoint saved earlier in this run is only complete once every rank has written
    meta = read_meta(path)
    check_layout(meta["layout"], layout, path, reshard)
    shard = meta.get("shard", False)
    booster.load_model(model, str(path / ("model" if shard else "model.pt")))
    booster.load_optimizer(optimizer, str(path / ("optimizer" if shard else "optimizer.pt")))
    if scheduler is not None:
        booster.load_lr_scheduler(scheduler, str(path / "lr_scheduler.pt"))
    if meta["layout"] == layout:
        # our own file: RNG tuples, not only tensors
        own = torch.load(_rank_file(path, this_rank()), weights_only=False)
        set_rng_state(own["rng"])
        data = DataPosition(**own["data"])
    else:  # resharded: the saved streams were other ranks'; start new ones, deterministically
        reseed(layout["seed"], meta["step"], this_rank())
        data = DataPosition(**meta["data"])
    return Resumed(path, meta["step"], data, meta.get("losses", []), meta)
    # [end: resume]


def reseed(seed: int, step: int, rank: int) -> None:
    """Seed every stream of this rank from (seed, step, rank): a fresh, reproducible start."""
    value = (seed * 1_000_003 + step) * 1_009 + rank
    random.seed(value)
    np.random.seed(value % 2**32)
    torch.manual_seed(value)  # also seeds every CUDA device
