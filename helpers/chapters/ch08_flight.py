"""Chapter 8, "Hang forensics": the two Flight Recorder labs, their dumps, and NCCL's INFO lines.

Used by the notebook of Chapter 8 and by ``tests/test_ch08_flight.py``. :func:`run_lab` launches
:mod:`helpers.demos.ch08_flight` (on gloo CPU ranks, or with ``backend="nccl"`` on one GPU per
rank, :func:`nccl_env`) and returns what each rank reported, the dumps, where the ranks' calls
diverge (:func:`helpers.train.flight_recorder.divergence`), torch's analyser's verdict and the
frame each rank's main thread was stuck in. :data:`EXAMPLE_FORMATS` are NCCL's own format
strings (:mod:`helpers.train.nccl_info`) filled in by :func:`example_lines`: lines in NCCL's
format, constructed here and not recorded, on which the parser is shown and tested.
:func:`issued_by` labels the skip lab's collectives for the figure of both labs,
:func:`helpers.figures.ch08_flight.hang_figure`.
"""

from __future__ import annotations

import re
from pathlib import Path

from helpers.run.launch import LaunchError, launch
from helpers.train import flight_labs as fl
from helpers.train import flight_recorder as fr

LABS = {"skip": 2, "pipeline": 4}  # lab -> ranks
NCCL_TIMEOUT_S = 20.0  # NCCL's watchdog needs a few seconds more than gloo to dump and abort
# the process group's timeout on gloo: the watchdog starts its dump STALL_S after the stall, and
# the first dump with stacks imports torch._inductor (about 1.5 s alone, 4 ranks on 2 cores take
# longer); a rank that times out before its dump is written leaves none
GLOO_TIMEOUT_S = 10.0


def nccl_env(folder: str | Path) -> dict[str, str]:
    """What a GPU run of the labs sets for NCCL's own dump on a watchdog timeout
    (``ProcessGroupNCCL.hpp``: ``TORCH_NCCL_DUMP_ON_TIMEOUT`` needs the buffer and the monitoring
    thread; error handling 3, "skip cleanup", as torchtitan's ``init_distributed`` sets it, so
    that the watchdog dumps before the process is torn down) and for the INFO lines
    :mod:`helpers.train.nccl_info` reads."""
    return {
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_NCCL_ENABLE_MONITORING": "1",
        "TORCH_FR_DUMP_TEMP_FILE": f"{Path(folder)}/{fr.PREFIX}",
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,P2P,SHM,NET,GRAPH",
    }


def lab_args(lab: str, folder: str | Path, backend: str | None = None, **kw) -> list[str]:
    """The demo's command-line arguments for ``lab``; ``kw`` adds flags (``micro=2``,
    ``bypass_rule=True``, ``schedule="capped"``)."""
    args = ["--lab", lab, "--dir", str(folder)] + (["--backend", backend] if backend else [])
    args += ["--timeout_s", str(NCCL_TIMEOUT_S if backend == "nccl" else GLOO_TIMEOUT_S)]
    for k, v in kw.items():
        args += [f"--{k}"] if v is True else [] if v is False else [f"--{k}", str(v)]
    return args


def run_lab(lab: str, folder: str | Path, backend: str | None = None, **kw) -> dict:
    """One lab to its hang and past it; everything the section shows. A run in which a rank
    reported a dump that it never wrote (it timed out first: the machine was too loaded for the
    dump to finish within :data:`GLOO_TIMEOUT_S`) runs once more, in ``folder``/retry."""
    out = _run_once(lab, Path(folder), backend, **kw)
    if not _complete(out):
        out = _run_once(lab, Path(folder) / "retry", backend, **kw)
    return out


def _complete(out: dict) -> bool:
    return {r["rank"] for r in out["ranks"] if r.get("dumped")} <= set(out["dumps"])


def _run_once(lab: str, folder: Path, backend: str | None, **kw) -> dict:
    env = nccl_env(folder) if backend == "nccl" else None
    if env:
        folder.mkdir(parents=True, exist_ok=True)  # NCCL's writer does not create it
    args = lab_args(lab, folder, backend, **kw)
    try:
        got = launch("ch08_flight", LABS[lab], args, timeout_s=180, show="none", env=env)
        results, lines = got.results, got.lines
    except LaunchError as e:  # NCCL's watchdog aborts the process; a refused layout exits
        results, lines = [], e.lines
    dumps = fr.read(folder) if folder.is_dir() else {}
    out = {"lab": lab, "ranks": results, "lines": lines, "dumps": dumps}
    if dumps:
        out["divergence"] = fr.divergence(dumps)
        out["analysis"] = fr.analyse(folder)
        out["verdict"] = verdict(out["analysis"])
        out["stuck_in"] = {r: stuck_frame(fr.stacks(folder, r)) for r in dumps if _has(folder, r)}
    return out


def _has(folder: Path, rank: int) -> bool:
    return (folder / f"{fr.STACKS}{rank}.txt").is_file()


def verdict(analysis: str) -> list[str]:
    """The analyser's headline lines: which collective, what is wrong, which ranks."""
    keep = (
        "Collective sequence number",
        "Not all ranks joining",
        "missing ranks",
        "error msg",
        "collective:",
    )
    return [ln.strip() for ln in analysis.splitlines() if ln.strip().startswith(keep)]


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


def stuck_frame(stacks: str) -> list[str]:
    """The main thread's innermost frames (``faulthandler``'s dump, most recent call first) down
    to the first frame of the book's own code: ``["recv", "_recv", "pipeline_step"]``."""
    threads = stacks.split("\n\n")
    main = next((t for t in threads if "in <module>" in t), "")
    names = []
    for m in _FRAME.finditer(main):
        names.append(m["fn"])
        if "/helpers/" in m["file"] and m["fn"] not in ("_recv", "wrapper"):
            break
    return [n for n in names if n != "wrapper"]


# NCCL 2.30's format strings, as its sources write them (module notes of helpers.train.nccl_info)
EXAMPLE_FORMATS = {
    "comm": "comm %s rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d",
    "ring": "Channel %02d/%02d :",
    "p2p": "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s",
    "net": "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s",
    "shm": "Channel %02d : %d[%d] -> %d[%d] via SHM/direct",
    "channels": (
        "%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, "
        "%d p2p channels per peer"
    ),
    "prefix": "%s:%d:%d [%d] NCCL INFO %s",  # src/debug.cc, after the optional timestamp
}


def example_lines(kind: str = "nvlink", channels: int = 2, host: str = "node0") -> list[str]:
    """INFO lines of a 2-rank communicator in NCCL's format, built from :data:`EXAMPLE_FORMATS`:
    ``nvlink`` (one node, P2P over CUMEM with reads), ``ib`` (two nodes, InfiniBand with
    GPUDirect RDMA) or ``shm`` (one node, through host memory). Constructed, not recorded."""
    f, out = EXAMPLE_FORMATS, []
    nodes = 2 if kind == "ib" else 1
    for rank in (0, 1):
        pid, dev = 1000 + rank, rank if nodes == 1 else 0
        name = host if nodes == 1 else f"node{rank}"
        msgs = [
            f["comm"] % ("0x5581c0a3e000", rank, 2, nodes, 3 - nodes, 0 if nodes == 2 else rank, 0)
        ]
        if rank == 0:
            msgs += [(f["ring"] % (c, channels)) + " 0 1" for c in range(channels)]
        peer = 1 - rank
        for c in range(channels):
            if kind == "nvlink":
                msgs.append(f["p2p"] % (c, 0, rank, dev, peer, 1 - dev, "CUMEM", "/read", ""))
            elif kind == "ib":
                msgs.append(f["net"] % (c, 0, rank, 0, peer, 0, "IB", 0, "/GDRDMA", "", ""))
            else:
                msgs.append(f["shm"] % (c, rank, dev, peer, 1 - dev))
        msgs.append(f["channels"] % (channels, channels, 0, 2 * channels, 2))
        out += [f["prefix"] % (name, pid, pid + 7, dev, m) for m in msgs]
    return out


def example_rows(kinds=("nvlink", "ib", "shm"), channels: int = 4) -> list[dict]:
    """What the parser reads from rank 0 of each constructed log (:func:`example_lines`)."""
    from helpers.train import nccl_info

    keep = ("nodes", "transport", "as logged", "coll channels", "p2p channels")
    out = []
    for kind in kinds:
        rank0 = nccl_info.rows(nccl_info.parse(example_lines(kind, channels)))[0]
        out.append({"log": kind, **{k: rank0[k] for k in keep}})
    return out


def schedule_rows(p: int, m: int) -> list[dict]:
    """Each stage's actions under the naive cool-down and the book's 1F1B, and the backwards the
    naive one runs too many."""
    naive, capped = fl.naive_1f1b(p, m), fl.SCHEDULES["capped"](p, m)
    return [
        {
            "stage": s,
            "naive": " ".join(a.label() for a in naive[s]),
            "book's 1F1B": " ".join(a.label() for a in capped[s]),
            "backwards too many": sum(a.kind == "BW" for a in naive[s]) - m,
        }
        for s in range(p)
    ]


def recorded_log(record: dict | None) -> tuple[list[dict], list[str]]:
    """A recorded log (:mod:`helpers.record.nccl_info`): what the parser reads from rank 0's
    lines, a row per fact, and the first line of each kind it reads ([], [] without a record)."""
    from helpers.train import nccl_info

    if not record:
        return [], []
    log = record["runs"][0].get("nccl_log", [])
    found = sorted(nccl_info.parse(log).values(), key=lambda s: (s.rank is None, s.rank or 0))
    summary = found[0] if found else None  # rank 0's process
    rows = nccl_info.facts(summary) if summary else []
    if summary and not summary.version and (version := nccl_info.version_of(log)):
        rows.insert(0, {"what": nccl_info.ONE_RANK["version"], "the log says": version})
    return rows, nccl_info.firsts(log)


def issued_by(lab: dict) -> dict[int, list[str]]:
    """The skip lab: for each rank, the training step that issued each recorded collective, read
    from its dump (4 all-reduces per step, one per parameter, except on the step the skipping rank
    skips) — what gloo paired with what."""
    out = {}
    for rank, trace in sorted(lab["dumps"].items()):
        steps = [
            s for s in range(len(trace["entries"])) if (rank, s) != (fl.SKIP_RANK, fl.SKIP_STEP)
        ]
        labels, per_step = [], fl.PARAMS_PER_STEP
        for i, e in enumerate(trace["entries"]):
            op = e["profiling_name"].split(":")[-1]
            labels.append(f"step {steps[i // per_step]}" if op == "all_reduce" else op)
        out[rank] = labels
    return out
