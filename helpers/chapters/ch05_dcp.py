"""Chapter 5, "Changing the layout on resume": the runs, the numbers and the figure of the section.

:func:`run_dcp` launches :mod:`helpers.demos.ch05_dcp`, :func:`run_deepspeed`
:mod:`helpers.demos.ch05_dcp_universal` (save, ``ds_to_universal``, load), :func:`run_colossal`
Chapter 5's ``--reshard`` (dp 2 -> dp 1), all on gloo CPU ranks on any machine (the demos build CPU
meshes). :func:`read_pieces` is the block arithmetic of a DCP load; :func:`table_rows` gives the
section's table (its figure: :func:`helpers.figures.ch05_resume.chunk_figure`).
"""

from __future__ import annotations

import math
from pathlib import Path

from helpers.run.env import placement_env
from helpers.run.launch import launch
from helpers.train import dcp_reshard as dr

SAVE_AT, STEPS = 4, 8
NAMES = {
    "dp2xtp2": "FSDP2 D=2 × TP T=2 (4 ranks)",
    "fsdp2": "FSDP2 D=2 (2 ranks)",
    "tp2": "TP T=2 (2 ranks)",
    "single": "one process",
}
# the DeepSpeed cells: (name, saved as (ZeRO stage, T, ranks), loaded as (T, ranks), unconverted)
DS_CELLS = [
    ("zero1-tp2-to-dp2", (1, 2, 4), (1, 2), False),
    ("zero1-tp2-raw", (1, 2, 4), (1, 2), True),
    ("zero3-dp4-to-dp2", (3, 1, 4), (1, 2), False),
]


def _args(**kw) -> list[str]:
    return [str(x) for k, v in kw.items() for x in (f"--{k}", v)]


def _cpu(demo: str, n: int, args: list[str], timeout_s: float):
    return launch(demo, n, args, timeout_s=timeout_s, show="none", env=placement_env(n, 0))


def run_dcp(workdir: Path, single: bool = False, repeats: int = 5, timeout_s: float = 300) -> dict:
    """Save under FSDP2 × TP on 4 ranks, load as FSDP2 and as TP on 2 (and on 1 if ``single``)."""
    folder = Path(workdir) / "dcp"
    common = _args(dir=folder, steps=STEPS, save_at=SAVE_AT)
    save = _cpu("ch05_dcp", 4, ["--phase", "save", *common, "--repeats", repeats], timeout_s)
    load = _cpu("ch05_dcp", 2, ["--phase", "load", *common], timeout_s)
    out = {"save": save.results, "load": load.results, "dir": str(folder)}
    if single:
        one = ["--phase", "load", *common, "--layouts", "single"]
        out["single"] = _cpu("ch05_dcp", 1, one, timeout_s).results
    return out


def _gap(a: list[float], b: list[float]) -> float:
    if len(a) != len(b):
        raise ValueError(f"{len(a)} losses against {len(b)}")
    return max(abs(x - y) for x, y in zip(a, b))


def dcp_gaps(run: dict) -> dict:
    """Max |resumed loss - uninterrupted loss| per loaded layout, with the two controls: AdamW's
    state left out (``weights_only``) and the first layout trained from step 0 (``scratch``, the
    drift that reduction order alone gives)."""
    ref = run["save"][0]["losses"]
    loaded = run["load"][0]
    gaps = {name: _gap(v["losses"], ref[SAVE_AT:]) for name, v in loaded["layouts"].items()}
    if "single" in run:
        gaps["single"] = _gap(run["single"][0]["layouts"]["single"]["losses"], ref[SAVE_AT:])
    return {
        "layouts": gaps,
        "weights_only": _gap(loaded["weights_only"], ref[SAVE_AT:]),
        "scratch": _gap(loaded["from_scratch"], ref),
        "async_vs_sync": max(r["async_vs_sync"] for r in run["load"]),
        "reference": ref,
        "tolerance": dr.TOLERANCE,
    }


def async_numbers(run: dict) -> dict:
    """The save timings in seconds: for each kind, the slowest rank of each repeat (every rank
    waits for the slowest at the next collective), and the best of the repeats: other processes
    on shared cores only ever add time, and the first repeat carries one-time set-up."""

    def best(key: str) -> float:
        repeats = range(len(run["save"][0][key]))
        return min(max(r[key][i] for r in run["save"]) for i in repeats)

    return {
        "blocking_s": best("blocking_s"),
        "async_return_s": best("async_return_s"),
        "async_complete_s": best("async_complete_s"),
        "overlapped_complete_s": max(r["overlapped_complete_s"] for r in run["save"]),
        "staged_bytes": sum(r["state_bytes"] for r in run["save"]),
    }


# --- the block arithmetic of a DCP load: blocks are {"offsets": [...], "sizes": [...]}


def area(blocks: list[dict]) -> int:
    """Elements of ``blocks`` together."""
    return sum(math.prod(b["sizes"]) for b in blocks)


def block_text(b: dict) -> str:
    """``rows 0:32, columns 96:192``: a 2-D block as slices of the whole tensor."""
    (r, c), (h, w) = b["offsets"], b["sizes"]
    return f"rows {r}:{r + h}, columns {c}:{c + w}"


def overlap(a: dict, b: dict) -> dict | None:
    """The block that ``a`` and ``b`` share, or None where they share nothing."""
    lo = [max(x, y) for x, y in zip(a["offsets"], b["offsets"])]
    ends = zip(a["offsets"], a["sizes"], b["offsets"], b["sizes"])
    hi = [min(x + n, y + m) for x, n, y, m in ends]
    if any(h <= low for low, h in zip(lo, hi)):
        return None
    return {"offsets": lo, "sizes": [h - low for low, h in zip(lo, hi)]}


def read_pieces(saved: list[dict], wanted: list[dict]) -> list[list[dict]]:
    """For each wanted block, the pieces of the saved blocks it is read from (each with the saved
    block's ``rank``): what DCP's planner reads, ``create_read_items_for_chunk_list``."""
    return [[{**o, "rank": s.get("rank")} for s in saved if (o := overlap(w, s))] for w in wanted]


def grid_blocks(shape: list[int], grid: list[int]) -> list[dict]:
    """A 2-D tensor split evenly into ``grid[0]`` row blocks × ``grid[1]`` column blocks."""
    (rows, cols), (gr, gc) = shape, grid
    if gr < 1 or gc < 1 or rows % gr or cols % gc:
        raise ValueError(f"{rows} × {cols} does not split evenly into {gr} × {gc} blocks")
    h, w = rows // gr, cols // gc
    cells = [(i, j) for i in range(gr) for j in range(gc)]
    return [{"rank": i * gc + j, "offsets": [i * h, j * w], "sizes": [h, w]} for i, j in cells]


def reshard_reads(shape: list[int], saved: list[int], loaded: list[int]) -> dict:
    """A weight saved in ``saved`` blocks (rows × columns) and loaded in ``loaded`` blocks: the
    pieces one new rank reads (the most over ranks), the pieces of the whole load, and the
    elements one new rank reads."""
    pieces = read_pieces(grid_blocks(shape, saved), grid_blocks(shape, loaded))
    return {
        "per_rank": max(map(len, pieces)),
        "reads": sum(map(len, pieces)),
        "elements_per_rank": max(map(area, pieces)),
    }


def planner_pieces(saved: list[dict], wanted: list[dict]) -> list[int]:
    """How many read items torch's own planner makes for each wanted block."""
    import torch
    from torch.distributed.checkpoint import metadata as md
    from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

    def chunk(b: dict):
        return md.ChunkStorageMetadata(torch.Size(b["offsets"]), torch.Size(b["sizes"]))

    shape = [max(b["offsets"][d] + b["sizes"][d] for b in saved) for d in range(2)]
    tensor = md.TensorStorageMetadata(
        md.TensorProperties(dtype=torch.float32), torch.Size(shape), [chunk(b) for b in saved]
    )
    return [len(create_read_items_for_chunk_list("w", tensor, [chunk(w)])) for w in wanted]


def loaded_blocks(run: dict) -> dict[str, list[dict]]:
    """The block of the demo's weight each loading rank holds, per layout (one process too)."""
    runs = [run["load"], *([run["single"]] if "single" in run else [])]
    return {
        name: [{**r["layouts"][name]["chunk"], "rank": r["rank"]} for r in rs]
        for rs in runs
        for name in rs[0]["layouts"]
    }


# --- DeepSpeed and Colossal-AI beside it


def run_deepspeed(workdir: Path, cells=DS_CELLS, timeout_s: float = 300) -> dict:
    """Each DeepSpeed cell: one save per source layout (shared), one conversion, one load."""
    from helpers.train import ds_universal as du

    workdir, saved, out = Path(workdir), {}, {}
    for name, (zero, tp, n), (tp_to, n_to), raw in cells:
        key = f"zero{zero}-tp{tp}-n{n}"
        if key not in saved:
            src = workdir / key
            args = ["--phase", "save", *_args(dir=src, tp=tp, zero=zero)]
            run = _cpu("ch05_dcp_universal", n, args, timeout_s)
            conv = du.convert(src, workdir / f"{key}-universal")
            saved[key] = {"losses": run.first(0)["losses"], "dir": src, "convert": conv}
        src = saved[key]
        folder = src["dir"] if raw else workdir / f"{key}-universal"
        args = ["--phase", "load", *_args(dir=folder, tp=tp_to, zero=zero)] + ["--raw"] * raw
        got = _cpu("ch05_dcp_universal", n_to, args, timeout_s).first(0)
        cell = {"saved": (zero, tp, n), "loaded": (tp_to, n_to), "raw": raw}
        if "error" in got:
            cell["error"] = got["error"]
        else:
            cell["gap"] = _gap(got["losses"], src["losses"][SAVE_AT:])
        cell["params_converted"] = len(src["convert"]["params"])
        out[name] = cell
    return out


def run_colossal(workdir: Path) -> dict:
    """Chapter 5's ``--reshard`` on the CPU: a dp = 2 checkpoint of step 3 resumed on one
    process, against the dp = 2 run and dp = 1 from scratch (dropout off)."""
    from helpers.record.ch05 import RESUME_FROM, reshard

    cfg = "helpers/demos/ch05_tiny.yaml"
    out = reshard(Path(workdir), "none", ("dp2", cfg, 2), ("dp1", cfg, 1))
    source, _, resumed = out["runs"]
    notes = resumed.get("notes", [])
    return {
        **{k: v for k, v in out.items() if k != "runs"},
        "ok": all(r["ok"] for r in out["runs"]),
        "reseeded": any("under a new layout" in s and "re-seeded" in s for s in notes),
        "carried": resumed["losses"][:RESUME_FROM] == source["losses"][:RESUME_FROM],
    }


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.1e}"


def _ds_layout(zero: int, tp: int, n: int) -> str:
    return f"ZeRO-{zero} D={n // tp}" + (f" × AutoTP T={tp}" if tp > 1 else "") + f" ({n} ranks)"


def table_rows(gaps: dict, ds: dict, colossal: dict | None, gpu: dict | None) -> list[dict]:
    """Which format reshards which degrees: one row per run (or per reason it was not run);
    ``gaps`` is :func:`dcp_gaps`' answer, ``ds`` :func:`run_deepspeed`'s, ``colossal``
    :func:`run_colossal`'s and ``gpu`` the two-GPU ``reshard`` of :mod:`helpers.record.ch05`."""
    cpu = "CPU, gloo"
    rows = [
        _row("PyTorch DCP", NAMES["dp2xtp2"], NAMES[name], _fmt(gap), cpu)
        for name, gap in gaps["layouts"].items()
    ]
    for cell in ds.values():
        (zero, tp, n), (tp_to, n_to) = cell["saved"], cell["loaded"]
        fmt = "DeepSpeed, unconverted" if cell["raw"] else "DeepSpeed universal"
        error = cell.get("error", "").split(":")[0]
        result = f"load fails ({error})" if "error" in cell else _fmt(cell["gap"])
        rows.append(_row(fmt, _ds_layout(zero, tp, n), _ds_layout(zero, tp_to, n_to), result, cpu))
    if colossal:
        gap = _fmt(colossal["max_loss_diff_vs_source"])
        rows.append(_row("Colossal-AI sharded", "DDP D=2 (2 ranks)", "one process", gap, cpu))
    gpu_gap = _fmt(gpu["max_loss_diff_vs_source"]) if gpu else "not recorded"
    gpu_row = ("TP T=2 (2 GPUs, bf16)", "DP D=2 (2 GPUs)", gpu_gap, "2 GPUs (section above)")
    rows.append(_row("Colossal-AI sharded", *gpu_row))
    cuda = "needs CUDA (colossalai/accelerator/cpu_accelerator.py)"
    rows.append(_row("Colossal-AI sharded", "TP or PP > 1", "any", "not run on the CPU", cuda))
    return rows


def _row(fmt: str, src: str, dst: str, result: str, where: str) -> dict:
    return {"format": fmt, "saved as": src, "loaded as": dst, "max |Δloss|": result, "run": where}
