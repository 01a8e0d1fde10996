"""The multi-node runs of Chapters 5 and 8, one table: what each runs, what it needs, what it shows.

Each run is a function of its own module (:mod:`helpers.cluster.multinode`, ``ssh``, ``slurm``,
``node_faults``, ``mesh_orders``, ``node_egress``) that returns a dict of what happened.
:func:`why_not_live` says whether this machine can make the hosts and has the programs a run needs;
:func:`compute` runs one now. A machine that cannot shows the recording instead
(:func:`helpers.record.multinode.result`).
"""

from __future__ import annotations

import importlib
import shutil

from helpers.cluster.hosts import namespaces_possible

# name -> (module:function, programs it needs besides ip/nsenter, what it shows)
RUNS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "torchrun_3d": (
        "helpers.cluster.multinode:torchrun_3d",
        (),
        "torchrun across two hosts: Chapter 2's dp x pp x tp = 2 x 2 x 2, 4 ranks per host",
    ),
    "mesh_orders": (
        "helpers.cluster.mesh_orders:measure",
        ("tc",),
        "tp x dp = 2 x 2 on two hosts with a 200 Mbit/s link, tp inside and across hosts",
    ),
    "node_egress": (
        "helpers.cluster.node_egress:measure",
        ("tc",),
        "all-reduce over 1 and 2 ranks per host on a 200 Mbit/s link: a ring leaves a node once",
    ),
    "slurm": (
        "helpers.cluster.slurm:slurm_job",
        ("munged", "slurmctld", "slurmd", "sbatch", "sacct"),
        "a two-node SLURM cluster: the book's job script, launch_from_slurm and torchrun",
    ),
    "hostfile": (
        "helpers.cluster.ssh:book_scenarios",
        ("sshd", "ssh-keygen"),
        "colossalai run --hostfile over SSH: works, hangs on Debian's 127.0.1.1 line, fixed",
    ),
    "lost_node": (
        "helpers.cluster.node_faults:lost_node",
        (),
        "host 1 dies mid-run (Chapter 8): how long until every rank ends, what diagnose says",
    ),
    "link_down": (
        "helpers.cluster.node_faults:link_down",
        (),
        "host 1's link goes down mid-run (Chapter 8): the collective timeout across nodes",
    ),
    "elastic_restart": (
        "helpers.cluster.node_faults:elastic_restart",
        (),
        "--max_restarts 1: host 1 dies and comes back, the job resumes from its checkpoint",
    ),
}


def why_not_live(name: str) -> str | None:
    """None when run ``name`` can run here, else why not (no root, no namespaces, a program)."""
    if name not in RUNS:
        raise KeyError(f"no multi-node run {name!r}: one of {', '.join(RUNS)}")
    why = namespaces_possible()
    if why:
        return f"network namespaces unavailable ({why})"
    missing = [p for p in RUNS[name][1] if shutil.which(p) is None and not _sbin(p)]
    return f"not installed: {', '.join(missing)}" if missing else None


def _sbin(program: str) -> bool:
    return any(shutil.which(program, path=d) for d in ("/usr/sbin", "/sbin"))


def compute(name: str) -> dict:
    """Run ``name`` now (no sharing, no recording)."""
    module, _, function = RUNS[name][0].partition(":")
    return getattr(importlib.import_module(module), function)()
