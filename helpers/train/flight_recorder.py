"""Chapter 8, "Hang forensics": PyTorch's Flight Recorder on gloo ranks, dumped while they hang.

Used by :mod:`helpers.demos.ch08_flight` and :mod:`helpers.chapters.ch08_flight`. What torch 2.13
records, read in its sources:

* The recorder is one ring buffer per process, ``TORCH_FR_BUFFER_SIZE`` entries (old name
  ``TORCH_NCCL_TRACE_BUFFER_SIZE``), 2000 by default, so it is on unless set to 0
  (``torch/csrc/distributed/c10d/FlightRecorder.hpp``, the ``FlightRecorder`` constructor).
* gloo writes an entry for every collective it queues (``ProcessGroupGloo::enqueue``, which
  says "p2p does not call enqueue": send and recv are not recorded) and marks it retired when
  its worker thread has run it (``ProcessGroupGloo::runLoop``; also when it failed). gloo has no
  events, so an entry's state stays "scheduled"; ``retired`` tells done from pending.
* The group table of a gloo dump is empty: the backend records its group's name and ranks in its
  constructor, before ``distributed_c10d.py`` sets them (``_new_process_group_helper``:
  ``backend_class.options.group_name = group_name`` after ``ProcessGroupGloo(...)``). Every
  gloo group lands under the name "" and the analyser cannot match entries to groups;
  :func:`group_table` rebuilds it from the live process and :func:`dump` writes it in.
* NCCL dumps on its own: its watchdog writes ``<TORCH_FR_DUMP_TEMP_FILE><rank>`` when a
  collective times out and ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` (``ProcessGroupNCCL.hpp``). gloo has
  no watchdog, so :class:`Watchdog` plays its part: a thread that dumps this rank's buffer and
  the Python stacks of all its threads once an entry has been pending ``stall_s`` seconds, and
  tells the other ranks through the rendezvous store to do the same, as NCCL's ranks signal each
  other; a rank stuck in a ``recv``, which leaves no entry, dumps on that signal.

The dumps are the pickles the analyser reads: ``torchfrtrace <folder> -p fr_trace_rank_``
(``torch/distributed/flight_recorder/fr_trace.py``); :func:`analyse` runs it.
"""

from __future__ import annotations

import ast
import faulthandler
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch.distributed as dist

PREFIX = "fr_trace_rank_"  # <folder>/fr_trace_rank_<rank>, the analyser infers the prefix
STACKS = "stacks_rank_"  # <folder>/stacks_rank_<rank>.txt: faulthandler's dump of every thread
SIGNAL_KEY = "book_fr_dump"  # set in the store by the first rank that dumps
STALL_S = 2  # seconds an entry may be pending before the watchdog dumps


def raw_dump(only_active: bool = False, frames: bool = True) -> dict:
    """This process's Flight Recorder buffer, as torch pickles it for the analyser (with each
    entry's Python stack when ``frames``)."""
    from torch._C._distributed_c10d import _dump_fr_trace

    return pickle.loads(_dump_fr_trace(True, frames, only_active))


def group_table() -> dict:
    """Every process group of this process as the analyser expects it: name -> name, description
    and global ranks (what the gloo backend should have recorded)."""
    from torch.distributed.distributed_c10d import _world

    out = {}
    for pg, name in _world.pg_names.items():
        ranks = dist.get_process_group_ranks(pg)
        out[name] = {"name": name, "desc": pg.group_desc, "ranks": str(ranks)}
    return out


# [start: dump]
def dump(folder: str | os.PathLike, rank: int, reason: str) -> Path:
    """Write this rank's buffer (with the group table rebuilt) and every thread's stack."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    trace = raw_dump()
    trace["pg_config"] = group_table()  # gloo recorded "" for every group
    trace["book_reason"] = reason
    path = folder / f"{PREFIX}{rank}"
    path.write_bytes(pickle.dumps(trace))
    with open(folder / f"{STACKS}{rank}.txt", "w") as f:
        f.write(f"# rank {rank}: {reason}\n")
        f.flush()
        faulthandler.dump_traceback(file=f, all_threads=True)
    return path
    # [end: dump]


class Watchdog(threading.Thread):
    """Dump once, when an entry of this rank has been pending ``stall_s`` seconds or another rank
    has dumped (a key in the default group's store); poll every ``poll_s`` seconds."""

    def __init__(self, folder, stall_s: float = STALL_S, poll_s: float = 0.1):
        super().__init__(daemon=True, name="book-fr-watchdog")
        self.folder, self.stall_s, self.poll_s = Path(folder), stall_s, poll_s
        self.rank = dist.get_rank()
        self.store = dist.distributed_c10d._get_default_store()
        self.dumped, self.stopped = threading.Event(), threading.Event()
        self.reason = ""
        # The first dump with stacks imports torch._inductor's symbolizer (seconds on a loaded
        # machine): pay it now, not while the other ranks' timeouts run.
        raw_dump(frames=True)

    def stop(self) -> None:
        """No dump after all (the run ended normally); call before the group is destroyed."""
        self.stopped.set()
        self.join(timeout=5)

    # [start: watchdog]
    def run(self) -> None:
        while not (self.dumped.is_set() or self.stopped.wait(self.poll_s)):
            now = time.time_ns()
            late = [
                e
                for e in raw_dump(only_active=True, frames=False)["entries"]
                if not e["retired"] and now - e["time_created_ns"] > self.stall_s * 1e9
            ]
            if late:
                e = late[0]
                self.reason = f"{e['profiling_name']} #{e['collective_seq_id']} pending"
                self.store.set(SIGNAL_KEY, str(self.rank))  # the others dump too
            elif self.store.check([SIGNAL_KEY]):
                self.reason = f"rank {self.store.get(SIGNAL_KEY).decode()} asked"
            else:
                continue
            dump(self.folder, self.rank, self.reason)
            self.dumped.set()
            # [end: watchdog]


def read(folder: str | os.PathLike) -> dict[int, dict]:
    """The dumps in ``folder`` by rank."""
    folder = Path(folder)
    return {
        int(p.name[len(PREFIX) :]): pickle.loads(p.read_bytes()) for p in folder.glob(f"{PREFIX}*")
    }


def stacks(folder: str | os.PathLike, rank: int) -> str:
    return (Path(folder) / f"{STACKS}{rank}.txt").read_text()


def analyse(folder: str | os.PathLike, *extra: str) -> str:
    """torch's analyser on the dumps (``torchfrtrace``), its whole output."""
    cmd = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(folder)]
    done = subprocess.run([*cmd, "-p", PREFIX, *extra], capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def calls(trace: dict) -> list[tuple[int, str, list]]:
    """(collective number, operation, input sizes) of every entry of one rank's dump, in order."""
    return [
        (e["collective_seq_id"], e["profiling_name"].split(":")[-1], e["input_sizes"])
        for e in trace["entries"]
    ]


def divergence(dumps: dict[int, dict]) -> dict:
    """Where the ranks' collectives stop agreeing: in the first group, by name, in which they
    do, the first collective number at which a member's call differs from another's (operation
    or input sizes) or is missing; who called what there, and who never got there.
    Point-to-point entries (NCCL's) are left out."""
    table = {name: g for trace in dumps.values() for name, g in trace["pg_config"].items()}
    by_group: dict[str, dict[int, dict[int, tuple]]] = {}
    for rank, trace in dumps.items():
        for e in trace["entries"]:
            if e.get("is_p2p"):  # NCCL records send/recv too: matched by peer, not in order
                continue
            call = (e["profiling_name"].split(":")[-1], e["input_sizes"], e["retired"])
            by_group.setdefault(e["process_group"][0], {}).setdefault(rank, {})
            by_group[e["process_group"][0]][rank][e["collective_seq_id"]] = call
    for name, by_rank in sorted(by_group.items()):
        members = ast.literal_eval(table[name]["ranks"])
        for seq in sorted({s for seqs in by_rank.values() for s in seqs}):
            seen = {r: by_rank.get(r, {}).get(seq) for r in members}
            kinds = {(c[0], str(c[1])) for c in seen.values() if c is not None}
            missing = sorted(r for r, c in seen.items() if c is None)
            if len(kinds) > 1 or missing:
                return {
                    "group": name,
                    "desc": table[name]["desc"],
                    "seq": seq,
                    "calls": {
                        r: None if c is None else {"op": c[0], "sizes": c[1], "retired": c[2]}
                        for r, c in seen.items()
                    },
                    "missing": missing,
                }
    return {}
