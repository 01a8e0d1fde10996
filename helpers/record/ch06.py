"""Chapter 6's four frameworks on one model and one GPU, alternated round by round.

    python -m helpers.record ch06 --record --gpus 1    # results/1x<GPU>/ch06_frameworks.json
    python -m helpers.record ch06 --quick              # the tiny shape: DeepSpeed and FSDP2, CPU

Colossal-AI's LowLevelZero ZeRO-2 and PyTorch FSDP2 with the levers of Chapter 8's one-GPU
head-to-head (:data:`helpers.record.flagship_levers.H2H`), DeepSpeed ZeRO-2 from the converter's
JSON (:mod:`helpers.demos.ch06_deepspeed_train`) and Megatron-Core's ``GPTModel`` with the
distributed optimizer and SDPA core attention (:mod:`helpers.demos.ch06_megatron`): the flagship's
0.94 B Llama at sequence 2048 in bf16, the same token batches, each run checked against the same
single-GPU reference (``--fail_on_divergence``). :data:`ROWS` names each row's levers; a row
whose first round runs out of memory is run at its fallback micro-batch from then on.
:data:`ROUNDS` rounds alternate the rows (round 1 of each, then round 2, ...); every run is saved
as it ends, with the matmul ceiling measured in the same call
(:func:`helpers.record.flagship_levers.matmul_ceiling`) and the verdict over the rounds so far
(:func:`helpers.record.flagship_summary.compare`: medians, spread, ratio to FSDP2). A call that
stops at ``--budget_s`` leaves a record that the same command, run again, continues: the runs of
an earlier call made by the same command at the same commit are kept, and only the missing ones
run.
"""

from __future__ import annotations

import json
import time

from helpers.record import cli
from helpers.record import flagship_levers as fl
from helpers.record.flagship_runs import CHECK, ROUND, SHAPE
from helpers.record.flagship_summary import compare
from helpers.record.results import earlier, provenance, save
from helpers.record.runner import run_part

RECORD = "ch06_frameworks"
ROUNDS = 5
COMMAND = cli.command("ch06", ["--record", "--gpus", "1"])
BEST = fl.BEST  # cuDNN SDPA, Liger's fused linear cross-entropy, micro-batch 48
# (name, demo, levers, fallback micro-batch): the levers each framework supports, named
ROWS = [
    (
        "Colossal-AI LowLevelZero ZeRO-2: compile, fused AdamW, cuDNN, Liger CE",
        "ch08_train",
        dict(fl.H2H)["Colossal-AI LowLevelZero ZeRO-2, best levers"],
        32,
    ),
    (
        "PyTorch FSDP2: compile, fused AdamW, cuDNN, Liger CE",
        "ch08_train",
        dict(fl.H2H)["FSDP2, best levers"],
        32,
    ),
    (
        "DeepSpeed ZeRO-2: compile, fused AdamW, cuDNN, Liger CE",
        "ch06_deepspeed_train",
        ["--zero_stage", "2", "--compile", "--optim", "adamw_fused", *BEST],
        32,
    ),
    (
        "Megatron-Core distributed optimizer: SDPA cuDNN, its fused CE",
        "ch06_megatron",
        ["--sdpa", "cudnn", "--mcore_fused_ce", "--micro_batch", "32"],
        16,
    ),
]
TIMEOUT_S = 300.0
TINY = "--layers 2 --hidden 256 --heads 4 --kv_heads 4 --vocab 512 --precision bf16".split()
TINY += "--seq 256 --steps 3 --warmup 1 --ref_steps 2".split() + CHECK


def _micro(args: list[str], micro: int) -> list[str]:
    """``args`` with its (last) ``--micro_batch`` replaced by ``micro``."""
    out = list(args)
    i = len(out) - 1 - out[::-1].index("--micro_batch")
    out[i + 1] = str(micro)
    return out


QUICK = ("PyTorch FSDP2", "DeepSpeed ZeRO-2")  # the rows that run on the CPU
GPU_ONLY = ("--compile", "--mcore_fused_ce", "--norm_on_device")  # and --sdpa, --fused_ce, --optim


def run_list(rounds: int = ROUNDS, quick: bool = False, micro: dict | None = None) -> list:
    """(name, demo, args, timeout_s) of every run, round-major; ``micro``: row name -> the
    micro-batch a row runs at instead of its own (its fallback, once it ran out of memory).
    ``quick``: the rows of :data:`QUICK` on the tiny shape, without the GPU-only levers."""
    out = []
    for k in range(1, rounds + 1):
        for name, demo, levers, _ in ROWS:
            args = _micro(levers, micro[name]) if micro and name in micro else levers
            if quick and not name.startswith(QUICK):
                continue
            if quick:
                for flag in ("--sdpa", "--fused_ce", "--optim"):
                    args = fl._without(args, flag)
                args = TINY + [a for a in args if a not in GPU_ONLY]
            else:
                args = SHAPE + fl.H2H_COMMON + args
            out.append((f"{name}{ROUND}{k}", demo, [*args, "--name", name], TIMEOUT_S))
    return out


def _kept(earlier: dict | None, command: str) -> list[dict]:
    """The runs of an earlier call of the same command at the same commit that finished well
    (a run the budget cut short, or one that failed, runs again)."""
    if not earlier or earlier["provenance"].get("command") != command:
        return []
    if earlier["provenance"].get("git_commit") != provenance(command)["git_commit"]:
        return []
    return [r for r in earlier["runs"] if "seconds" in r and r.get("ok")]


def _oom(run: dict) -> bool:
    return any(r.get("oom") for r in run.get("results", []))


def record(quick, budget_s, save_results, show="none", copy_to=None, rounds=ROUNDS) -> list:
    """Record (or, without ``save_results``, only run) the runs not yet recorded."""
    start, name = time.monotonic(), RECORD + ("_quick" if quick else "")
    words = ["--record"] if save_results else []
    command = cli.command("ch06", words + (["--quick"] if quick else ["--gpus", "1"]))
    runs = _kept(earlier(name), command) if save_results else []
    micro = {r["row"]: r["micro_batch"] for r in runs if r.get("fallback")}
    ceiling = None if quick else fl.matmul_ceiling()
    print(f"[ch06] {len(runs)} runs kept; matmul ceiling {ceiling} TFLOP/s", flush=True)
    fallbacks = {n: f for n, _, _, f in ROWS}
    k = 0
    while k < len(chosen := run_list(rounds, quick, micro)):
        run_name, demo, args, timeout_s = chosen[k]
        k += 1
        if any(r["name"] == run_name for r in runs):
            continue
        part = [(run_name, demo, 1, args, timeout_s)]
        [run] = run_part("ch06", "h2h", part, start + budget_s, show)
        row = run_name.split(ROUND)[0]
        run.update(row=row, matmul_ceiling_tflops=ceiling)
        if _oom(run) and row not in micro and run_name.endswith(ROUND + "1"):
            micro[row] = fallbacks[row]  # from now on at its fallback, round 1 again
            run["name"] = f"{row}: out of memory at {args[args.index('--micro_batch') + 1]}"
            run["name"] += ROUND + "1"
            k -= 1
        elif row in micro:
            run.update(fallback=True, micro_batch=micro[row])
        runs.append(run)
        summary = [fl.row(r["name"], r, r.get("matmul_ceiling_tflops")) for r in runs]
        print(json.dumps({x: v for x, v in summary[-1].items() if x not in fl.BULKY}), flush=True)
        if save_results and "seconds" in run:
            extra = {"rounds": rounds, "compare": compare(summary), "part": "h2h"}
            kept = [{**r, "summary": s} for r, s in zip(runs, summary)]
            print(f"[ch06] wrote {save(name, kept, command, copy_to, extra)}", flush=True)
    done = {r["name"] for r in runs if "seconds" in r and r.get("ok")}
    left = [n for n, *_ in run_list(rounds, quick, micro) if n not in done]
    done = "all rounds recorded" if not left else f"{len(left)} runs left: run the command again"
    print(f"[ch06] {done} ({time.monotonic() - start:.0f} s)", flush=True)
    return runs


def _flags(p) -> None:
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds (default {ROUNDS})")


def _check(args) -> None:
    if not args.quick and (args.gpus or 1) != 1:
        raise ValueError("the head-to-head runs every framework on one GPU: --gpus 1")


SPEC = cli.Recorder(
    "ch06",
    "Chapter 6: Colossal-AI, FSDP2, DeepSpeed and Megatron-Core on one GPU, alternated rounds",
    "ch06_frameworks.json",
    lambda a: record(a.quick, a.budget_s, a.record, a.show, a.copy_to, a.rounds),
    flags=("quick", "budget_s", "gpus", "copy_to", "show"),
    quick="the tiny shape on the CPU: DeepSpeed and FSDP2 (ch06_frameworks_quick.json)",
    budget_s=540,
    gpus=1,
    extra=_flags,
    check=_check,
)
