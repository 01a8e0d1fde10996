"""Chapter 5, "Several hosts on one machine", and Chapter 8's node faults: the multi-node runs,
live where this machine can make hosts, otherwise as recorded.

Each run is a function of its own module (``helpers.cluster.multinode``, ``ssh``, ``slurm``,
``node_faults``, ``mesh_orders``, ``node_egress``; the table: :mod:`helpers.cluster.runs`) that
returns a dict of what happened. :func:`result` (:mod:`helpers.record.multinode`) runs one live,
through :func:`helpers.run.shared.once` (so a test and the notebook that show the same run make it
once per test run), when network namespaces and the programs it needs are here; else it returns the
recording ``python -m helpers.record multinode --record`` made, from ``results/cpu/multinode.json``,
with its provenance. :func:`source_line` says which.
"""

from __future__ import annotations

import json

from helpers.cluster.runs import RUNS as RUNS
from helpers.cluster.runs import why_not_live as why_not_live
from helpers.record.multinode import RECORD
from helpers.record.multinode import recorded as recorded
from helpers.record.multinode import result as result


def source_line(run: dict) -> str:
    """One short line: live on this machine, or recorded (when, and why it did not run here); the
    record's full provenance is the appendix's (:func:`helpers.notebook.provenance.glue_provenance`
    of :func:`record`)."""
    import textwrap

    if run["source"] == "live":
        line = "live on this machine: " + run.get("hosts_banner", "two hosts in network namespaces")
    else:
        line = (
            f"recorded on {run['provenance']['date'][:10]} (here: {run['why_not_live']}); "
            "how: the appendix, How this book was measured"
        )
    return textwrap.fill(line, 100, subsequent_indent="    ")


def record() -> dict | None:
    """The whole recording of the multi-node runs (``results/cpu/multinode.json``), or None."""
    return json.loads(RECORD.read_text()) if RECORD.is_file() else None


def sacct_rows(lines: list[str]) -> list[dict]:
    """``sacct``'s fixed-width table as rows (header words as keys; the dashed line skipped)."""
    head = lines[0].split()
    rows = [line.split() for line in lines[1:] if line.strip() and not line.startswith("---")]
    return [dict(zip(head, values)) for values in rows if len(values) == len(head)]


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
