"""Chapter 9, "Single GPU: the ResNet baseline": the CPU runs, and the GPU records' tables beside
Colossal-AI's.

Used by ``notebooks/09_quick_demos.ipynb``: the digits runs on one and two CPU processes, their
resumed run and evaluation (:func:`cpu_rows`, :func:`resume_lines`); the 2-GPU runs, the one-GPU
record beside them, and the accuracies of Colossal-AI's ``examples/images/resnet/README.md`` as a
reference.
"""

from __future__ import annotations

from helpers.chapters.ch09_records import failure_line, first_rank, recorded, run_status
from helpers.notebook.measured import approx
from helpers.record.ch09 import ONE_GPU_COMMAND as RESNET_ONE_GPU_COMMAND
from helpers.record.results import box_label, describe


SEED_RESNET = {  # Colossal-AI's examples/images/resnet/README.md: ResNet-18, CIFAR-10, 80 epochs
    "Single-GPU baseline, fp32": 85.85,
    "Booster DDP, fp32": 84.91,
    "Booster DDP, fp16": 85.46,
    "Booster Low Level ZeRO": 84.50,
    "Booster Gemini": 84.60,
}


def seed_reference(result: dict) -> float | None:
    """Colossal-AI's CIFAR-10 accuracy (80 epochs) for the same plugin and GPU count, if it has
    one."""
    if result.get("world_size") == 1:
        return SEED_RESNET["Single-GPU baseline, fp32"]
    return {
        "torch_ddp": SEED_RESNET["Booster DDP, fp32"],
        "torch_ddp_fp16": SEED_RESNET["Booster DDP, fp16"],
        "low_level_zero": SEED_RESNET["Booster Low Level ZeRO"],
        "gemini": SEED_RESNET["Booster Gemini"],
    }.get(result.get("plugin"))


def resnet_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = first_rank(run, "accuracy")
        seed = seed_reference(r)
        rows.append(
            {
                "run": run["name"],
                "data": r.get("data", "digits"),
                "epochs": r.get("epochs", ""),
                "test accuracy": f"{100 * r['accuracy']:.2f} %"
                if "accuracy" in r
                else "not run: " + run["not_run"]
                if run.get("not_run")
                else failure_line(run),
                "images/s": r.get("images_per_s", ""),
                "peak MiB": r.get("peak_mib", ""),
                "SyncBatchNorm": r.get("sync_batchnorm", ""),
                "Colossal-AI, CIFAR-10, 80 epochs (reference only)": f"{seed:.2f} %"
                if seed
                else "",
            }
        )
    return rows


def resnet_world_rows(one: dict | None = None, two: dict | None = None) -> list[dict]:
    """The ResNet runs of the 2-GPU box beside the one-GPU box's (``--gpus 1``): per run, each box's
    test accuracy, images/s and peak memory. The 2-process runs are "not run: needs 2 GPUs" in the
    one-GPU record; without a one-GPU record each row says "not recorded yet on 1×H200" and the
    command. ``one``/``two``: records (default: results/1x…/ and 2x…/ch09_resnet.json)."""
    one = one if one is not None else recorded("resnet", gpus=1)
    two = two if two is not None else recorded("resnet", gpus=2)
    sides = [(two, box_label(two, 2)), (one, box_label(one, 1))]
    names = list(
        dict.fromkeys(r["name"] for record, _ in sides for r in (record or {}).get("runs", []))
    )
    rows = []
    for name in names:
        row = {"run": name}
        for record, box in sides:
            run = next((r for r in (record or {}).get("runs", []) if r["name"] == name), None)
            r = first_rank(run, "accuracy") if run else {}
            if record is None:
                cell = f"not recorded yet on {box}"
            elif run is None:
                cell = f"not in the {box} record"
            elif "accuracy" in r:
                cell = f"{100 * r['accuracy']:.2f} %"
            else:
                cell = run_status(run)
            row[f"{box} test accuracy"] = cell
            row[f"{box} images/s"] = r.get("images_per_s", "—") if run else "—"
            row[f"{box} peak MiB"] = r.get("peak_mib", "—") if run else "—"
            row[f"{box} epochs"] = r.get("epochs", "—") if run else "—"
        row["note"] = f"record it with: {RESNET_ONE_GPU_COMMAND}" if one is None else ""
        rows.append(row)
    return rows


def resnet_one_gpu_status(one: dict | None = None) -> str:
    """The one-GPU ResNet record's provenance, or that it is not recorded yet and the command."""
    one = one if one is not None else recorded("resnet", gpus=1)
    if one is None:
        return (
            "ch09_resnet: not recorded yet on 1×H200. On a machine with one GPU: "
            f"{RESNET_ONE_GPU_COMMAND}"
        )
    return (
        "Only the quick smoke recording exists on one GPU.\n" if one.get("quick") else ""
    ) + describe(one)


# -- the CPU runs: one process, then two; resume and evaluate ------------------------------------
def cpu_rows(runs: list[dict], train_size: int, batch: int = 100) -> list[dict]:
    """Chapter 9, "One process, then two: no code changes": one row per run of
    ``helpers.demos.ch09_resnet_train`` (its RESULT line): world size, learning rate, global batch
    (``batch`` images per process), steps per epoch over ``train_size`` images, the LR milestones,
    the first and last epoch's loss and the test accuracy (both machine-dependent, so
    :func:`helpers.notebook.measured.approx`)."""
    return [
        {
            "processes": r["world_size"],
            "learning rate": r["lr"],
            "global batch": batch * r["world_size"],
            "steps per epoch": train_size // (batch * r["world_size"]),
            "milestones": r["milestones"],
            f"loss epoch 1 → {len(r['losses'])}": f"{approx(r['losses'][0])} → "
            f"{approx(r['losses'][-1])}",
            "test accuracy": approx(100 * r["accuracy"], ".2f", " %"),
        }
        for r in runs
    ]
