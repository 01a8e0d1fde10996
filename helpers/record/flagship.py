"""Chapter 8's flagship benchmark: one 0.94 B Llama under PyTorch FSDP2 and Colossal-AI, one run each knob.

    python -m helpers.record.flagship --record                 # every run (~9 min on 2×H200) -> results/<hw>/flagship.json
    python -m helpers.record.flagship --record --only "FSDP2, eager" "LowLevelZero ZeRO-2, eager"
    python -m helpers.record.flagship --quick                  # a tiny shape (on CPU: gloo, fp32, FSDP2 and TorchDDP)
    python -m helpers.record.flagship --record --head_to_head  # the best runs, alternated 3 rounds -> flagship_h2h.json
    python -m helpers.record.flagship --record --gpus 1 --budget_s 220   # one GPU: WORLD1_RUNS -> results/1x<GPU>/flagship.json

Every run is :mod:`helpers.demos.ch08_train` in its own torchrun: the same model (16 layers, hidden
2048, 32 000-token vocabulary), the same fresh token batches (micro-batch 8 × 2048 tokens per GPU
unless the run says otherwise) and bf16 with fp32 master weights. The list is a tuning story: the
baselines, then one knob per row (:mod:`helpers.train.speed`), then FSDP2 given the same knobs so that the
comparison stays fair. Each run prints one JSON line (tokens/s per GPU, MFU, peak memory, the loss
after n steps and its distance from a single-GPU reference trained on the same first batches).

On one GPU (``--gpus 1``, a machine that shows exactly one) the list is :data:`WORLD1_RUNS`: the
eager baseline and the best Colossal-AI and FSDP2 runs of the 2-GPU list, the same flags with fewer
steps (:data:`WORLD1_COMMON`), each naming the 2-GPU run it is shown beside
(:func:`helpers.chapters.ch08_flagship.world_rows`). The reference is then the same one-GPU training, so the
loss check still holds every run to ``--fail_on_divergence``.

MFU is reported twice. ``mfu`` is the book's (:mod:`helpers.cost.mfu`, N = the parameters that do
matrix multiplications); ``mfu_all_params`` counts N = every parameter, the input embedding too,
as PaLM states its formula (Chowdhery et al. 2022, appendix B):
(6N + 12·L·h·s)·tokens / (time · GPUs · 989.5 TFLOP/s).
"""

from __future__ import annotations

import argparse
import json
import shlex
import time

from helpers.record.runner import loss_verdict, mean_losses, run_part
from helpers.cost.mfu import flops_per_token, mfu

DEMO = "ch08_train"
NPROC = 2
SHAPE = [
    "--layers",
    "16",
    "--hidden",
    "2048",
    "--heads",
    "16",
    "--kv_heads",
    "16",
    "--vocab",
    "32000",
]
LOSS_TOLERANCE = (
    0.05  # |mean rank loss − reference| over the reference steps, bf16 (ch09's runs: ≤ 0.01)
)
CHECK = ["--fail_on_divergence", str(LOSS_TOLERANCE)]  # a run whose loss leaves the reference fails
COMMON = [
    "--precision",
    "bf16",
    "--seq",
    "2048",
    "--steps",
    "10",
    "--warmup",
    "3",
    "--ref_steps",
    "3",
    "--profile",
    "1",
] + CHECK
FSDP2 = ["--framework", "fsdp2"]
ZERO2 = ["--plugin", "zero", "--zero_stage", "2"]
BUCKET = ["--plugin_kw", "reduce_bucket_size_in_m=128"]
TUNED = ZERO2 + BUCKET + ["--compile"]
RUNS = [  # (name, flags): the knob each row changes is in its name
    ("FSDP2, eager", FSDP2 + ["--micro_batch", "8"]),
    (
        "HybridParallel ZeRO-2, eager",
        ["--plugin", "hybrid", "--zero_stage", "2", "--micro_batch", "8"],
    ),
    ("LowLevelZero ZeRO-2, eager", ZERO2 + ["--micro_batch", "8"]),
    ("+ reduce buckets 12 → 128 M elements", ZERO2 + BUCKET + ["--micro_batch", "8"]),
    ("+ torch.compile per layer", TUNED + ["--micro_batch", "8"]),
    (
        "+ fused torch AdamW instead of HybridAdam",
        TUNED + ["--optim", "adamw_fused", "--micro_batch", "8"],
    ),
    ("+ micro-batch 8 → 16", TUNED + ["--optim", "adamw_fused", "--micro_batch", "16"]),
    (
        "+ overlap the parameter all-gather",
        TUNED
        + [
            "--optim",
            "adamw_fused",
            "--micro_batch",
            "16",
            "--plugin_kw",
            "overlap_allgather=True",
        ],
    ),
    (
        "+ gradient norm kept on the GPU (no host sync in step)",
        TUNED
        + [
            "--optim",
            "adamw_fused",
            "--micro_batch",
            "16",
            "--plugin_kw",
            "overlap_allgather=True",
            "--norm_on_device",
        ],
    ),
    (
        "ZeRO-2 → ZeRO-1 (all-reduce, no gradient shards)",
        ["--plugin", "zero", "--zero_stage", "1"]
        + BUCKET
        + ["--compile", "--optim", "adamw_fused", "--micro_batch", "16"],
    ),
    ("FSDP2 + torch.compile per layer", FSDP2 + ["--compile", "--micro_batch", "8"]),
    (
        "FSDP2 + torch.compile + fused AdamW",
        FSDP2 + ["--compile", "--optim", "adamw_fused", "--micro_batch", "8"],
    ),
    (
        "FSDP2 + torch.compile, micro-batch 16",
        FSDP2 + ["--compile", "--optim", "adamw_fused", "--micro_batch", "16"],
    ),
]
WORLD1_COMMON = [
    "--precision",
    "bf16",
    "--seq",
    "2048",
    "--steps",
    "5",
    "--warmup",
    "3",
    "--ref_steps",
    "3",
    "--profile",
    "1",
] + CHECK  # fewer timed steps than COMMON: the one-GPU call is ~8 minutes for 3 recorders
WORLD1_RUNS = [  # (name, flags, the 2-GPU run it is shown beside), in the order run: a budget cut drops the last
    ("LowLevelZero ZeRO-2, eager", ZERO2 + ["--micro_batch", "8"], "LowLevelZero ZeRO-2, eager"),
    # overlap_allgather left out: one rank has nothing to all-gather
    (
        "ZeRO-2 + compile + fused AdamW + norm on GPU, micro-batch 16",
        TUNED + ["--optim", "adamw_fused", "--micro_batch", "16", "--norm_on_device"],
        "+ gradient norm kept on the GPU (no host sync in step)",
    ),
    (
        "FSDP2 + torch.compile, micro-batch 16",
        FSDP2 + ["--compile", "--optim", "adamw_fused", "--micro_batch", "16"],
        "FSDP2 + torch.compile, micro-batch 16",
    ),
]
ONE_GPU_COMMAND = "python -m helpers.record.flagship --record --gpus 1"
ONE_GPU_BUDGET_S = 220  # the one-GPU recording's budget in the book's device call (tests check estimate_s against it)
# what a run costs on one H200, for the budget arithmetic: torchrun, imports, model build, boost; the
# Inductor compile of the layers (first warm-up step); one step per sequence of 2048 tokens (0.7 s at mbs 16)
START_S, COMPILE_S, STEP_S_PER_SEQUENCE = 20.0, 60.0, 0.7 / 16
HEAD_TO_HEAD = (
    "+ overlap the parameter all-gather",
    "+ gradient norm kept on the GPU (no host sync in step)",
    "FSDP2 + torch.compile, micro-batch 16",
)
ROUND = " · round "  # a repeated run's name: "<run> · round 2"


def run_list(
    quick: bool = False,
    only: list[str] | None = None,
    cpu: bool = False,
    rounds: int = 1,
    gpus: int = NPROC,
) -> list[tuple[str, list[str], float]]:
    """(name, demo args, timeout_s) of each run; ``quick`` = a tiny shape, 4 steps; ``cpu`` = FSDP2's only.

    ``rounds`` > 1 repeats the whole list that many times, interleaved (A B C A B C ...), so that a
    drift of the machine over the minutes hits every run alike; names gain " · round k".
    ``gpus`` = 1: :data:`WORLD1_RUNS` with :data:`WORLD1_COMMON` instead of RUNS with COMMON."""
    if rounds > 1:
        once = run_list(quick, only, cpu, gpus=gpus)
        return [(f"{n}{ROUND}{k}", a, t) for k in range(1, rounds + 1) for n, a, t in once]
    runs, common = (
        (RUNS, COMMON) if gpus != 1 else ([(n, a) for n, a, _ in WORLD1_RUNS], WORLD1_COMMON)
    )
    names = [n for n, _ in runs]
    for name in only or []:
        if name not in names:
            raise ValueError(
                f"unknown run {name!r}"
                + (" at --gpus 1" if gpus == 1 else "")
                + f": one of {names}"
            )
    chosen = [(n, a) for n, a in runs if not only or n in only]
    if cpu:  # gloo: only FSDP2 runs there (Colossal-AI's ZeRO plugins need one CUDA GPU per rank)
        chosen = [(n, a) for n, a in chosen if a[:2] == FSDP2]
    if quick:
        tiny = [
            "--layers",
            "2",
            "--hidden",
            "256",
            "--heads",
            "4",
            "--kv_heads",
            "4",
            "--vocab",
            "512",
            "--precision",
            "bf16",
            "--seq",
            "256",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--ref_steps",
            "2",
        ] + CHECK
        return [(n + " (tiny)", tiny + a + ["--name", n], 300.0) for n, a in chosen]
    return [(n, SHAPE + common + a + ["--name", n], 420.0) for n, a in chosen]


def estimate_s(args: list[str]) -> float:
    """Seconds one run of ``args`` should take on one H200 (START_S + COMPILE_S when compiled +
    every step the demo takes, the reference's included): the budget arithmetic of the one-GPU call."""
    from helpers.demos.ch08_train import parser

    ns = parser().parse_args(args)
    steps = ns.ref_steps + ns.warmup + ns.steps + ns.profile
    return (
        START_S + (COMPILE_S if ns.compile else 0.0) + steps * STEP_S_PER_SEQUENCE * ns.micro_batch
    )


def summarize(name: str, run: dict) -> dict:
    """One JSON-able row of a run: throughput, both MFUs, memory, losses against the reference."""
    ranks = [r for r in run.get("results", []) if "framework" in r]
    row = {
        "name": name,
        "ok": bool(run.get("ok")) and bool(ranks) and not any(r.get("oom") for r in ranks),
    }
    if not row["ok"]:
        row["error"] = (
            run.get("error") or next((r.get("error") for r in ranks if r.get("error")), "no result")
        )[-300:]
        return row
    r0 = ranks[0]
    gpus, seq = r0["gpus"], r0["seq"]
    mean = mean_losses(ranks)  # equal shards: the mean of the ranks' losses is the global batch's
    verdict = loss_verdict(ranks, LOSS_TOLERANCE)
    all_params = flops_per_token(r0["params"], r0["layers"], r0["hidden"], seq)
    kw = r0.get("plugin_kw") or (
        {"reduce_bucket_size_in_m": r0["bucket_mb"]} if r0.get("bucket_mb") else {}
    )
    row.update(
        framework=r0["framework"],
        plugin=r0["plugin"],
        optimizer=r0["optimizer"],
        compiled=r0.get("compiled"),
        zero_stage=r0.get("zero_stage"),
        norm_on_device=bool(r0.get("norm_on_device")),
        plugin_kw=kw,
        micro_batch=r0["micro_batch"],
        global_batch=r0["global_batch"],
        seq=seq,
        gpus=gpus,
        tokens_per_s_per_gpu=round(r0["tokens_per_s"] / gpus),
        mfu=r0["mfu"],
        mfu_all_params=round(mfu(r0["tokens_per_s"], all_params, gpus), 4),
        peak_gib=round(max(r.get("peak_mib", 0) for r in ranks) / 1024, 1),
        loss_last=round(mean[-1], 4) if mean else None,
        reference=r0["reference"],
        max_ref_gap=verdict["max_ref_gap"],
        loss_ok=verdict["valid"],
        seconds=run.get("seconds"),
        seconds_per_step=r0.get("seconds_per_step"),
        kernels=(r0.get("profile") or {}).get("kernels"),
    )
    return row


def record(
    quick: bool,
    only: list[str] | None,
    budget_s: float,
    save_results: bool,
    show: str = "none",
    head_to_head: bool = False,
    gpus: int = NPROC,
    copy_to: str | None = None,
) -> list[dict]:
    """Run the list (or the head-to-head: :data:`HEAD_TO_HEAD`, 3 interleaved rounds), one JSON line per run.

    ``gpus``: the world size of every run (1: :data:`WORLD1_RUNS`); ``copy_to``: also copy each save there."""
    from helpers.run.env import gpu_count
    from helpers.record.results import save

    start, rows, runs, path = time.monotonic(), [], [], None
    command = (
        "python -m helpers.record.flagship"
        + (" --record" if save_results else "")
        + (" --quick" if quick else "")
        + (" --head_to_head" if head_to_head else "")
        + (" --only " + " ".join(shlex.quote(n) for n in only) if only else "")
        + (f" --gpus {gpus} --budget_s {budget_s:g}" if gpus != NPROC else "")
    )
    rounds, record_name = (3, "flagship_h2h") if head_to_head else (1, "flagship")
    only = only or (list(HEAD_TO_HEAD) if head_to_head else None)
    chosen = run_list(quick, only, cpu=gpu_count() < gpus, rounds=rounds, gpus=gpus)
    print(f"[flagship] {len(chosen)} runs on {gpus} GPU(s), budget {budget_s:g} s", flush=True)
    for name, args, timeout_s in chosen:
        [run] = run_part(
            "flagship", "runs", [(name, DEMO, gpus, args, timeout_s)], start + budget_s, show
        )
        runs.append(run)
        rows.append(summarize(name, run))
        print(json.dumps(rows[-1]), flush=True)  # one JSON line per run
        if (
            save_results and "seconds" in run
        ):  # after every run that ran: a recording cut short keeps what
            path = save(
                record_name + ("_quick" if quick else ""),
                [{**r, "summary": s} for r, s in zip(runs, rows)],
                command,
                copy_to,
            )
    if head_to_head:
        for row in compare(rows):
            print(json.dumps(row), flush=True)
    if save_results:
        print(
            f"[flagship] wrote {path}"
            if any("seconds" in r for r in runs)
            else "[flagship] nothing ran: no record written",
            flush=True,
        )
    print(f"[flagship] done in {time.monotonic() - start:.0f} s", flush=True)
    return rows


def compare(rows: list[dict]) -> list[dict]:
    """The head-to-head's verdict: per run, the median over its rounds and the ratio to FSDP2's median.

    ``rows`` are :func:`summarize` rows named "<run> · round k"; a run counts only if every round
    that ran finished with its loss on the reference (rounds the budget skipped are left out). The ratio is of tokens/s per GPU (the same model, batch
    and precision, so also of MFU)."""
    import statistics

    groups: dict[str, list[dict]] = {}
    for r in rows:
        if not r["ok"] and r.get("error", "").startswith("skipped"):
            continue  # a round the time budget did not reach is not a round
        groups.setdefault(r["name"].split(ROUND)[0], []).append(r)
    out = []
    for name, rs in groups.items():
        valid = all(r["ok"] and r["loss_ok"] for r in rs)
        speeds = [r["tokens_per_s_per_gpu"] for r in rs if r["ok"]]
        out.append(
            {
                "name": name,
                "rounds": len(rs),
                "valid": valid,
                "framework": next((r["framework"] for r in rs if r["ok"]), None),
                "tokens_per_s_per_gpu": speeds,
                "median": statistics.median(speeds) if speeds else None,
                "mfu_median": statistics.median(r["mfu"] for r in rs if r["ok"])
                if speeds
                else None,
                "mfu_all_params_median": statistics.median(
                    r["mfu_all_params"] for r in rs if r["ok"]
                )
                if speeds
                else None,
                "spread": round((max(speeds) - min(speeds)) / statistics.median(speeds), 4)
                if speeds
                else None,
            }
        )
    fsdp = [g for g in out if g["framework"] == "fsdp2" and g["valid"]]
    for g in out:
        g["vs_fsdp2"] = round(g["median"] / fsdp[0]["median"], 4) if fsdp and g["median"] else None
    return out


def parser() -> argparse.ArgumentParser:
    """The recorder's command line (the tests parse the one-GPU device command with it)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--record", action="store_true", help="write results/<hardware>/flagship.json")
    p.add_argument("--quick", action="store_true", help="the tiny shape (flagship_quick.json)")
    p.add_argument("--only", nargs="*", default=None, help="run names to run")
    p.add_argument(
        "--budget_s", type=float, default=570, help="skip the runs that would start after this"
    )
    p.add_argument(
        "--head_to_head",
        action="store_true",
        help="the best Colossal-AI and FSDP2 runs, 3 interleaved rounds (flagship_h2h.json)",
    )
    p.add_argument(
        "--show", choices=("none", "rank0", "all"), default="none", help="stream the ranks' output"
    )
    p.add_argument(
        "--gpus",
        type=int,
        default=None,
        help=f"world size of every run (default {NPROC}; 1: the one-GPU list, WORLD1_RUNS)",
    )
    p.add_argument(
        "--copy_to", default=None, help="also copy the record here after every run (e.g. $OUT)"
    )
    return p


def main() -> None:
    from helpers.record.runner import world_mismatch

    p = parser()
    args = p.parse_args()
    gpus = args.gpus or NPROC
    wrong = world_mismatch(args.gpus, args.record)
    if wrong:
        p.error(wrong)
    if args.head_to_head and gpus != NPROC:
        p.error(f"--head_to_head alternates the {NPROC}-GPU runs: not with --gpus {gpus}")
    try:
        run_list(args.quick, args.only, gpus=gpus)
    except ValueError as e:
        p.error(str(e))
    record(
        args.quick,
        args.only,
        args.budget_s,
        args.record,
        args.show,
        args.head_to_head,
        gpus,
        args.copy_to,
    )


if __name__ == "__main__":
    main()
