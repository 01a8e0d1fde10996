"""Chapters 4 and 5 on two GPUs: the entry point under HybridParallelPlugin, killed and resumed.

What the CPU runs of Chapter 5 cannot show, run on a box with two CUDA GPUs (NCCL) through the
same entry point, ``helpers.demos.ch05_train``, and the ``ch05_gpu_*`` configs:

* **kill and resume** for tensor parallelism (tp = 2) and for a 1F1B pipeline (pp = 2, four
  micro-batches, ``booster.execute_pipeline``), with *sharded* checkpoints: an uninterrupted run,
  a run whose rank 1 SIGKILLs itself at step 5, and its resume from step 3;
* **resume under another layout**: a tp = 2 checkpoint of step 3 resumed as dp = 2 (``--reshard``),
  next to the uninterrupted tp = 2 run and a dp = 2 run from scratch (dropout off in these three,
  so that only the layout differs);
* **Chapter 4's dry run** of the seed's 64-GPU layout on two processes (``scaled_down``).

Record (results/<hardware>/ch05_gpu.json)::

    python -m helpers.record ch05 --record

On a CPU the chapters show that record with its provenance (:func:`recorded`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from helpers.run.env import losses_from_lines
from helpers.train.weights import compare_final_weights
from helpers.record import cli, results
from helpers.record.runner import run_one
from helpers.run.result_types.records import Record
from helpers.train import checkpoint as ckpt
from helpers.config.dry_run import scaled_down
from helpers.config.loading import load_config
from helpers.config.plugin import plugin_spec

NPROC = 2
RECORD = "ch05_gpu"
KILL_AT, KILL_RANK, RESUME_FROM = 5, 1, 3  # save_interval 3 in the configs: the last save before 5


def _from_lines(ok: bool, lines: dict[int, list[str]]) -> dict:
    """What a run's output says besides its RESULT lines: rank 0's notes on resuming, or the
    injected fault and the losses logged before a failure."""
    if ok:
        starts = ("resumed", "Hybrid", "Torch")
        return {"notes": [line for line in lines.get(0, []) if line.startswith(starts)]}
    return {
        "fault": next(
            (line for rank in lines.values() for line in rank if line.startswith("FAULT")), None
        ),
        "losses_before_failure": losses_from_lines(lines.get(0, [])),
    }


def _run(
    name: str,
    config: str | Path,
    args: list[str],
    workdir: Path,
    show: str,
    expect_failure: bool = False,
    nproc: int = NPROC,
) -> dict:
    """One launch of the entry point (:func:`helpers.record.runner.run_one`); a failure is recorded
    (with the failing rank), not raised. A run that finished adds its losses, plugin, backend, last
    checkpoint and per-step signals.

    Runs named ``"<dir>:<what>"`` share the checkpoint folder ``<dir>`` (a killed run and its
    resume)."""
    full = ["--config", str(config), "--checkpoint_dir", str(workdir / name.split(":")[0]), *args]
    print(
        f"[ch05-gpu] {name} on {nproc} processes: {' '.join(args) or '(no extra flags)'}",
        flush=True,
    )
    run = run_one(name, "ch05_train", nproc, full, 300, show, beat=False, read_lines=_from_lines)
    run["config"] = Path(config).name
    if not run["ok"]:
        if not expect_failure:
            print(f"[ch05-gpu] {name} FAILED: {run['error']}", flush=True)
        return run
    final = next(r for r in run["results"] if r.get("final"))
    run.update(
        losses=final["losses"],
        plugin=final["plugin"],
        backend=final["backend"],
        last_checkpoint=final["last_checkpoint"],
        signals=[r["signals"] for r in run["results"] if "signals" in r],
    )
    return run


def _max_diff(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def kill_and_resume(
    layout: str,
    workdir: Path,
    show: str,
    config: str | None = None,
    nproc: int = NPROC,
    kill_rank: int = KILL_RANK,
) -> dict:
    """Uninterrupted, killed at step 5, resumed: losses and final weights compared."""
    config = config or gpu_config(layout)
    full = _run(f"{layout}-full", config, [], workdir, show, nproc=nproc)
    killed = _run(
        f"{layout}-run:killed",
        config,
        ["--kill_at", str(KILL_AT), "--kill_rank", str(kill_rank)],
        workdir,
        show,
        expect_failure=True,
        nproc=nproc,
    )
    folder = workdir / f"{layout}-run"
    on_disk = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    resumed = _run(f"{layout}-run:resumed", config, ["--resume"], workdir, show, nproc=nproc)
    out = {"layout": layout, "runs": [full, killed, resumed], "on_disk_after_kill": on_disk}
    if full["ok"] and resumed["ok"] and not killed["ok"]:
        out["max_loss_diff"] = _max_diff(full["losses"], resumed["losses"])
        out["weights"] = compare_final_weights(resumed["last_checkpoint"], full["last_checkpoint"])
    return out


def reshard(
    workdir: Path,
    show: str,
    source: tuple[str, str, int] | None = None,
    target: tuple[str, str, int] | None = None,
) -> dict:
    """A checkpoint of step 3 saved under ``source`` and resumed under ``target`` (``--reshard``),
    each given as (label, config, processes); by default tp = 2 → dp = 2 on two GPUs. Dropout is
    off in all three runs, so that only the layout differs."""
    (src, src_config, src_n), (dst, dst_config, dst_n) = (
        source or ("tp2", gpu_config("tp2"), NPROC),
        target or ("dp2", gpu_config("dp2"), NPROC),
    )
    quiet = ["--dropout", "0", "--keep_last", "0"]  # keep the source's step 3 whatever is pruned
    tp = _run(f"{src}-nodropout", src_config, quiet, workdir, show, nproc=src_n)
    dp = _run(f"{dst}-nodropout", dst_config, quiet, workdir, show, nproc=dst_n)
    out = {"source": src, "target": dst, "runs": [tp, dp]}
    if not tp["ok"]:
        return out
    into = workdir / f"{dst}-from-{src}"
    into.mkdir()  # the source's step-3 checkpoint becomes the target's starting point
    shutil.copytree(
        ckpt.step_dir(workdir / f"{src}-nodropout", RESUME_FROM), ckpt.step_dir(into, RESUME_FROM)
    )
    resumed = _run(
        into.name, dst_config, quiet + ["--resume", "--reshard"], workdir, show, nproc=dst_n
    )
    out["runs"].append(resumed)
    if resumed["ok"]:
        after = slice(RESUME_FROM, None)
        out["max_loss_diff_vs_source"] = _max_diff(tp["losses"][after], resumed["losses"][after])
        if dp["ok"]:
            out["max_loss_diff_from_scratch"] = _max_diff(tp["losses"][after], dp["losses"][after])
        out["weights_vs_source"] = compare_final_weights(
            resumed["last_checkpoint"], tp["last_checkpoint"]
        )
    return out


def dry_run(workdir: Path, show: str) -> dict:
    """Chapter 4: the seed's 64-GPU layout scaled down to two GPUs, one step and a save."""
    small = scaled_down(load_config("seed_complete.yaml"), NPROC)
    config = workdir / "seed_dry_run.yaml"
    config.write_text(small.to_yaml())
    run = _run("seed-dry-run", config, [], workdir, show)
    p = small.parallelism
    return {
        "layout": {
            "data": p.data,
            "tensor": p.tensor,
            "pipeline": p.pipeline,
            "precision": small.train.precision,
        },
        "plugin_call": plugin_spec(small).call(),
        "config": small.to_yaml(),
        "run": run,
    }


def gpu_config(layout: str) -> str:
    """The two-GPU config of a layout: tp2, pp2 or dp2."""
    return f"helpers/configs/ch05_gpu_{layout}.yaml"


def run_all(show: str = "none") -> dict:
    """Every GPU experiment of Chapters 4 and 5, in a temporary folder removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="ch05-gpu-"))
    try:
        return {
            "kill_and_resume": [
                kill_and_resume(layout, workdir, show) for layout in ("tp2", "pp2")
            ],
            "reshard": reshard(workdir, show),
            "dry_run": dry_run(workdir, show),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def summary_rows(record: dict) -> list[dict]:
    """One row per experiment: what was compared and how far apart it came out."""
    rows = []
    for kr in record["kill_and_resume"]:
        killed = kr["runs"][1]
        rows.append(
            {
                "experiment": f"{kr['layout']}: killed at step {KILL_AT}, "
                f"resumed from step {RESUME_FROM}",
                "killed rank": killed.get("failed_rank"),
                "max |Δloss|": _fmt(kr.get("max_loss_diff")),
                "max |Δweight|": _fmt(kr.get("weights", {}).get("max_abs_diff")),
            }
        )
    rs = record["reshard"]
    rows.append(
        {
            "experiment": f"{rs['source']} step {RESUME_FROM} resumed as {rs['target']} "
            f"(vs uninterrupted {rs['source']})",
            "killed rank": "—",
            "max |Δloss|": _fmt(rs.get("max_loss_diff_vs_source")),
            "max |Δweight|": _fmt(rs.get("weights_vs_source", {}).get("max_abs_diff")),
        }
    )
    rows.append(
        {
            "experiment": f"{rs['target']} from scratch (vs {rs['source']} from scratch)",
            "killed rank": "—",
            "max |Δloss|": _fmt(rs.get("max_loss_diff_from_scratch")),
            "max |Δweight|": "—",
        }
    )
    return rows


def _fmt(x) -> str:
    return "failed" if x is None else f"{x:.2e}"


def recorded() -> Record | None:
    """:func:`helpers.record.results.recorded`: the GPU runs (results/<hardware>/ch05_gpu.json)."""
    return results.recorded(RECORD)


def _record(args) -> None:
    record = run_all(args.show)
    rows = summary_rows(record)
    print(results.format_table(rows, list(rows[0])))
    if args.record:
        print("wrote", results.save(RECORD, [record], cli.command("ch05", ["--record"])))


SPEC = cli.Recorder(
    "ch05",
    "Chapters 4 and 5 on 2 GPUs: killed and resumed (tp, pp), resharded, the seed's dry run",
    f"{RECORD}.json",
    _record,
    flags=("show",),
)
