"""Chapter 5, "Several hosts on one machine", and Chapter 8's node faults: the multi-node runs,
live where this machine can make hosts, otherwise as recorded.

Each run is a function of its own module (``helpers.run.multinode``, ``ssh``, ``slurm``,
``node_faults``, ``mesh_orders``, ``node_egress``) that returns a dict of what happened.
:func:`result` runs one live, through :func:`helpers.run.shared.once` (so a test and the notebook
that show the same run make it once per test run), when network namespaces and the programs it
needs are here; else it returns the recording ``python -m helpers.record multinode --record``
made, from ``results/cpu/multinode.json``, with its provenance. :func:`source_line` says which.
"""

from __future__ import annotations

import importlib
import json
import shutil

from helpers.record.results import RESULTS_DIR
from helpers.run.shared import once

RECORD = RESULTS_DIR / "cpu" / "multinode.json"

# name -> (module:function, programs it needs besides ip/nsenter, what it shows)
RUNS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "torchrun_3d": (
        "helpers.chapters.ch05_multinode:torchrun_3d",
        (),
        "torchrun across two hosts: Chapter 2's dp x pp x tp = 2 x 2 x 2, 4 ranks per host",
    ),
    "mesh_orders": (
        "helpers.run.mesh_orders:measure",
        ("tc",),
        "tp x dp = 2 x 2 on two hosts with a 200 Mbit/s link, tp inside and across hosts",
    ),
    "node_egress": (
        "helpers.run.node_egress:measure",
        ("tc",),
        "all-reduce over 1 and 2 ranks per host on a 200 Mbit/s link: a ring leaves a node once",
    ),
    "slurm": (
        "helpers.run.slurm:slurm_job",
        ("munged", "slurmctld", "slurmd", "sbatch", "sacct"),
        "a two-node SLURM cluster: the book's job script, launch_from_slurm and torchrun",
    ),
    "hostfile": (
        "helpers.run.ssh:book_scenarios",
        ("sshd", "ssh-keygen"),
        "colossalai run --hostfile over SSH: works, hangs on Debian's 127.0.1.1 line, fixed",
    ),
    "lost_node": (
        "helpers.run.node_faults:lost_node",
        (),
        "host 1 dies mid-run (Chapter 8): how long until every rank ends, what diagnose says",
    ),
    "link_down": (
        "helpers.run.node_faults:link_down",
        (),
        "host 1's link goes down mid-run (Chapter 8): the collective timeout across nodes",
    ),
    "elastic_restart": (
        "helpers.run.node_faults:elastic_restart",
        (),
        "--max_restarts 1: host 1 dies and comes back, the job resumes from its checkpoint",
    ),
}


def why_not_live(name: str) -> str | None:
    """None when run ``name`` can run here, else why not (no root, no namespaces, a program)."""
    from helpers.run.hosts import namespaces_possible

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


def recorded(name: str) -> dict | None:
    """The recorded run ``name`` with the record's provenance under ``"provenance"``, or None."""
    if not RECORD.is_file():
        return None
    record = json.loads(RECORD.read_text())
    run = next((r for r in record["runs"] if r["name"] == name), None)
    return None if run is None else {**run, "provenance": record["provenance"]}


def result(name: str) -> dict:
    """Run ``name`` live (once per test run) where it can run, else its recording; the dict's
    ``"source"`` says which ("live", or "recorded" with the reason it did not run)."""
    why = why_not_live(name)
    if why is None:
        return {"name": name, **once(f"multinode:{name}", lambda: compute(name)), "source": "live"}
    found = recorded(name)
    if found is None:
        raise RuntimeError(f"{name} cannot run here ({why}) and {RECORD} has no recording of it")
    return {**found, "source": "recorded", "why_not_live": why}


def source_line(run: dict) -> str:
    """One line: live on this machine, or recorded (when, by which command, at which commit)."""
    if run["source"] == "live":
        return "live on this machine: " + run.get("hosts_banner", "two hosts in network namespaces")
    p = run["provenance"]
    return (
        f"recorded {p['date']} with `{p['command']}` at {p['git_commit'][:10]} "
        f"(here: {run['why_not_live']})"
    )


# --- the runs of this chapter ------------------------------------------------------------------
def torchrun_3d() -> dict:
    """Chapter 2's dp × pp × tp = 2 × 2 × 2 from scratch on two hosts of four ranks each, one
    torchrun agent per host (:func:`helpers.run.multinode.launch_nodes`): where each rank ran, its
    groups, and its losses and gradients against the unsplit model."""
    from helpers.run.env import results_of
    from helpers.run.hosts import Hosts
    from helpers.run.multinode import launch_nodes, node_command, reader_line

    with Hosts(2) as hosts:
        job = launch_nodes("ch02_3d", hosts, 4, ["--pp", "2", "--tp", "2"], timeout_s=300)
        lines = [node_command(hosts, k, "ch02_3d", 4, ["--pp", "2", "--tp", "2"]) for k in (0, 1)]
        banner = hosts.banner()
    host_of = {r["rank"]: job.hosts[k] for k, out in enumerate(job.outputs)
               for r in results_of(out.splitlines())}  # fmt: skip
    return {
        "hosts_banner": banner,
        "commands": [reader_line(c, "job1") for c in lines],
        "seconds": job.seconds,
        "ranks": [
            {
                "rank": r["rank"],
                "host": host_of[r["rank"]],
                "groups": r["groups"],
                "losses_equal_reference": r["losses"] == r["ref_losses"],
                "max_grad_diff": r["max_grad_diff"],
            }
            for r in job.results
        ],
    }


# --- what the notebook shows -------------------------------------------------------------------
def rank_rows(run: dict) -> list[dict]:
    """One row per rank of the 3-D run: its host, groups, and its check against the unsplit
    model."""
    return [
        {
            "rank": r["rank"],
            "host": r["host"],
            **{f"{axis} group": r["groups"][axis] for axis in ("tp", "pp", "dp")},
            "losses = unsplit": r["losses_equal_reference"],
            "grads ≤ 1e-5": r["max_grad_diff"] <= 1e-5,
        }
        for r in run["ranks"]
    ]


def mesh_order_rows(run: dict) -> list[dict]:
    """The two mesh orders, measured beside the cost model's prediction."""
    rows = []
    for order, o in run["orders"].items():
        rows.append(
            {
                "order": order,
                "tp groups": o["groups"]["tp"],
                "tp inside a host": o["tp_inside_hosts"],
                "step ms measured": round(1e3 * o["measured"]["step_s"], 1),
                "step ms predicted": round(1e3 * o["predicted"]["step_s"], 1),
                "error %": round(100 * o["step_error"], 1),
                "comm share measured": round(o["measured"]["exposed_share"], 2),
                "comm share predicted": round(o["predicted"]["share"], 2),
            }
        )
    return rows


def node_egress_rows(run: dict) -> list[dict]:
    """The all-reduces of the node-egress run: measured beside the per-node and per-rank models,
    and the bytes that left the busier host per byte of message."""
    return [
        {
            "ranks per host": r["ranks_per_host"],
            "N": r["n"],
            "MiB": r["size_bytes"] // 2**20,
            "ms measured": round(1e3 * r["seconds"], 1),
            "ms per node": round(1e3 * r["per_node"], 1),
            "ms per rank": round(1e3 * r["per_rank"], 1),
            "measured / per node": round(r["ratio_per_node"], 2),
            "bytes out of a host / M": round(r["egress_per_message"], 2),
        }
        for r in run["rows"]
    ]


def node_egress_numbers(run: dict) -> dict[str, float]:
    """The node-egress run's numbers that Chapter 5's page quotes (glued by the notebook)."""
    out = {r["n"]: r["egress_per_message"] for r in run["rows"]}  # the largest size's, per N
    return {
        "ch05-egress-ratio": round(run["ratio_measured"], 2),
        "ch05-egress-card-mbs": round(run["card"]["bandwidth_bytes_per_s"] / 1e6, 1),
        "ch05-egress-rate-mbs": round(run["rate_bytes_per_s"] / 1e6, 1),
        "ch05-egress-worst-pct": round(100 * run["worst_per_node_error"], 1),
        "ch05-egress-bytes-n2": round(out[2], 2),
        "ch05-egress-bytes-n4": round(out[4], 2),
    }


def hostfile_rows(run: dict) -> list[dict]:
    """Chapter 5's three hostfile runs: what was different, how each ended, and the evidence."""
    rows = []
    for name, s in run["scenarios"].items():
        ok = s["returncode"] == 0 and not s["timed_out"]
        rows.append(
            {
                "run": name,
                "Debian 127.0.1.1 line": s["debian_etc_hosts"],
                "env": " ".join(f"{k}={v}" for k, v in s["env"].items()) or "-",
                "ranks per host": s["ranks"],
                "outcome": "all-reduce 0+1+2+3 = 6 on every rank" if ok else s["cause"],
                "s": round(s["seconds"]),
            }
        )
    return rows


def gloo_evidence(run: dict, name: str = "loopback_hang") -> list[str]:
    """The lines of a failed hostfile run that say why: what the hosts resolve and gloo's
    error."""
    s = run["scenarios"][name]
    return [e for e in s["evidence"] if "resolves" in e or "connectFullMesh" in e][:4]


def fault_rows(runs: dict[str, dict]) -> list[dict]:
    """Chapter 8's node faults side by side: what was done, when everything ended (bound), what
    ``diagnose`` said."""
    rows = []
    for name, r in runs.items():
        diagnosis = r.get("diagnosis")
        first = diagnosis[0] if isinstance(diagnosis, list) else diagnosis
        rows.append(
            {
                "fault": name,
                "all ended within bound": r["seconds_to_end"] is not None
                and r["seconds_to_end"] < r["bound_s"],
                "bound s": r["bound_s"],
                "processes left": sum(len(p) for p in r["left"]),
                "diagnosis": first["kind"] if first else "-",
            }
        )
    return rows
