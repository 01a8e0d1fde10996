"""Chapter 9's GPU runs: the quick demos under Colossal-AI's plugins, recorded with provenance.

Record on a box with two GPUs (one file per part, results/<hardware>/ch09_<part>.json):

    python -m helpers.record ch09 --record                     # every part
    python -m helpers.record ch09 --record --only resnet moe   # some parts
    python -m helpers.record ch09 --record --quick             # 1-2 min smoke run (ch09_quick)
    python -m helpers.record ch09 --record --only resnet --gpus 1 --budget_s 60  # results/1x<GPU>/

With ``--gpus 1`` (on a machine that shows exactly one GPU) the one-process runs are recorded and
every two-process run is kept in the record as not run, "needs 2 GPUs".

Parts: ``resnet`` (the ResNet demo under each plugin, on the digits: CIFAR-10 is not on the GPU
box either, the run says so), ``hybrid`` (HybridParallelPlugin layouts of a 0.54 B Llama: tokens/s,
MFU, peak memory, loss against a single-GPU reference), ``nan`` (the tp=2 bf16 NaN study on one
repeated batch), ``moe`` (MoeHybridParallelPlugin, Mixtral, ep=2 and ep=1), ``sp`` (sequence
length sweep until out of memory: no SP, split_gather, all_to_all; ring_attn attempted) and
``nan2048`` (the NaN study at the report's sequence length, 2,048; recorded: no NaN there either).
Each run has its own torchrun and timeout; a failing run is recorded with its error and the
recording goes on. Nothing here needs a GPU to import: the tests check the run lists on CPU.
"""

from __future__ import annotations

import time

from helpers.parallel.degrees import degree_flags
from helpers.record import cli
from helpers.record.results import save
from helpers.record.runner import run_part
from helpers.models.data import CIFAR_FOLDER, CIFAR_TEST, data_root, digits_csv

NPROC = 2
ONE_GPU_COMMAND = cli.command("ch09", ["--record", "--only", "resnet", "--gpus", "1"])
ONE_GPU_BUDGET_S = 60  # the one-GPU ResNet recording's budget in the device call (one ~35 s run)
RESNET_S = 40  # about what the one-GPU ResNet run takes on an H200 (the 2-GPU box's record: 34 s)
PARTS = ("resnet", "hybrid", "nan", "moe", "sp", "nan2048")
RESNET_PLUGINS = ("torch_ddp", "torch_ddp_fp16", "low_level_zero", "gemini")
HYBRID_COMMON = (
    "--preset half --batch 16 --seq 1024 --steps 10 --ref_steps 4 --optim hybrid_adam".split()
)
HYBRID_LAYOUTS = {  # name: (GPUs, flags)
    "1 GPU": (1, []),
    "dp=2 ZeRO-1": (2, ["--zero", "1"]),
    "tp=2": (2, degree_flags(tensor=2)),
    "pp=2 (1F1B, mbs 4)": (2, [*degree_flags(pipeline=2), "--mbs", "4"]),
    "tp=2 + split_gather SP": (2, degree_flags(tensor=2, sequence_mode="split_gather")),
    "sp=2 all_to_all": (2, degree_flags(sequence=2, sequence_mode="all_to_all")),
}
NAN_COMMON = (
    "--preset 1b --batch 8 --seq 1024 --steps 20 --ref_steps 0 --optim hybrid_adam --watch "
    "--lr 3e-4"
).split()
NAN_RUNS = {
    "tp=2 bf16, one repeated batch": [*degree_flags(tensor=2), "--repeat"],
    "tp=2 bf16, repeated, logits gathered (parallel_output=0)": (
        [*degree_flags(tensor=2), *"--repeat --parallel_output 0".split()]
    ),
    "dp=2 bf16, one repeated batch": ["--repeat"],
    "tp=2 bf16, fresh batches": degree_flags(tensor=2),
}
# the report's setting exactly (seq 2048, batch 8, zero 0); the gathered-logits run decides whether
# DistCrossEntropy is involved, if tp=2 ever fails where dp=2 does not
NAN2048_RUNS = {
    "tp=2 bf16, one repeated batch, seq 2048": [*degree_flags(tensor=2), "--repeat"],
    "dp=2 bf16, one repeated batch, seq 2048": ["--repeat"],
    "tp=2 bf16, repeated, seq 2048, logits gathered": [
        *degree_flags(tensor=2),
        *"--repeat --parallel_output 0".split(),
    ],
}
MOE_RUNS = {
    "Mixtral ep=2 (zero 1)": degree_flags(expert=2),
    "Mixtral ep=1, experts replicated (zero 1)": degree_flags("expert", expert=1),
}
SP_RUNS = {
    "tp=2, no SP": degree_flags(tensor=2),
    "tp=2 + split_gather (Megatron SP)": degree_flags(tensor=2, sequence_mode="split_gather"),
    "sp=2 all_to_all (Ulysses)": degree_flags(sequence=2, sequence_mode="all_to_all"),
    "sp=2 ring_attn (needs flash-attn)": [
        *degree_flags(sequence=2, sequence_mode="ring_attn"),
        "--seqs",
        "2048",
    ],
}


def run_list(
    part: str, quick: bool = False, gpus: int = NPROC
) -> list[tuple[str, str, int, list[str], float]]:
    """(name, demo, GPUs, args, timeout_s) of every run of a part; quick = smaller, fewer runs.

    ``gpus``: the recording's GPUs; the list is the same (runs needing more are recorded as not
    run by :func:`helpers.record.runner.run_part`), but the quick ResNet run is the one-GPU baseline
    when there is a single GPU."""
    if part == "resnet":
        epochs = ["--epochs", "3" if quick else "30"]
        common = ["--data", "digits", "--interval", "0", *epochs]
        baseline = ("1 GPU, torch_ddp (baseline)", "ch09_resnet_train", 1)
        runs = [(*baseline, common + ["-p", "torch_ddp"], 400.0)]
        runs += [
            (f"2 GPUs, {p}", "ch09_resnet_train", 2, common + ["-p", p], 240.0)
            for p in RESNET_PLUGINS
        ]
        if quick:  # the first GPU run compiles HybridAdam's kernels: it gets the long timeout
            first = runs[1] if gpus >= 2 else runs[0]
            return [(first[0], first[1], first[2], first[3], 400.0)]
        return runs
    if part == "hybrid":
        if quick:
            tiny = [*degree_flags(tensor=2), "--preset", "tiny", "--seq", "256", "--steps", "6"]
            return [("tp=2 (tiny)", "ch09_hybrid", 2, tiny, 240.0)]
        return [
            (n, "ch09_hybrid", g, HYBRID_COMMON + a, 300.0) for n, (g, a) in HYBRID_LAYOUTS.items()
        ]
    if part == "nan":
        if quick:
            tiny = [
                *degree_flags(tensor=2),
                *"--repeat --watch --preset tiny --seq 256 --steps 6 --ref_steps 0".split(),
            ]
            return [("tp=2 bf16, repeated (tiny)", "ch09_hybrid", 2, tiny, 240.0)]
        return [(n, "ch09_hybrid", 2, NAN_COMMON + a, 300.0) for n, a in NAN_RUNS.items()]
    if part == "nan2048":
        common = [a if a != "1024" else "2048" for a in NAN_COMMON]
        runs = [(n, "ch09_hybrid", 2, common + a, 300.0) for n, a in NAN2048_RUNS.items()]
        return run_list("nan", quick=True) if quick else runs
    if part == "moe":
        if quick:
            small = [
                *degree_flags(expert=2),
                *"--layers 2 --hidden 256 --seq 256 --steps 4 --ref_steps 2".split(),
            ]
            return [("Mixtral ep=2 (small)", "ch09_mixtral", 2, small, 240.0)]
        return [(n, "ch09_mixtral", 2, a, 300.0) for n, a in MOE_RUNS.items()]
    if part == "sp":
        if quick:
            tiny = [
                *degree_flags(sequence=2, sequence_mode="all_to_all"),
                *"--preset tiny --seqs 512,1024".split(),
            ]
            return [("sp=2 all_to_all (tiny)", "ch09_sp_sweep", 2, tiny, 240.0)]
        return [(n, "ch09_sp_sweep", 2, a, 420.0) for n, a in SP_RUNS.items()]
    raise ValueError(f"unknown part {part!r}: one of {PARTS}")


def cifar10_present() -> bool:
    """Whether CIFAR-10 is under $DATA on this machine (it is not on the book's GPU box)."""
    return (data_root() / CIFAR_FOLDER / CIFAR_TEST[0]).exists()


def digits_missing() -> str | None:
    """None when the digits can be read here (scikit-learn, or the copy in helpers/data), else why
    not."""
    try:
        digits_csv()
    except FileNotFoundError as e:
        return str(e)
    return None


def record(
    parts: list[str],
    quick: bool,
    budget_s: float,
    save_results: bool,
    show: str = "none",
    gpus: int = NPROC,
    copy_to: str | None = None,
) -> dict[str, list]:
    """Every run of ``parts`` within ``budget_s``; on ``gpus`` < 2 the two-GPU runs are recorded as
    not run ("needs 2 GPUs") and the one-GPU runs run (results/1x<GPU>/ch09_<part>.json)."""
    start = time.monotonic()
    words = ["--record", *(["--quick"] if quick else []), "--only", *parts]
    words += ["--gpus", str(gpus), "--budget_s", f"{budget_s:g}"] if gpus != NPROC else []
    command = cli.command("ch09", words)
    recorded: dict[str, list] = {}
    for part in parts:
        missing = None
        if part == "resnet":
            present = cifar10_present()
            print(
                f"[ch09] CIFAR-10 under $DATA: {'present' if present else 'absent'}; "
                "the ResNet runs use the digits",
                flush=True,
            )
            missing = digits_missing()
        runs = run_part(
            "ch09",
            part,
            run_list(part, quick, gpus),
            start + budget_s,
            show,
            not_run=missing,
            max_gpus=gpus,
        )
        for run in runs:
            if part == "resnet":
                run["cifar10_present"] = present
        recorded[part] = runs
        if save_results and not quick:
            print("[ch09] wrote", save(f"ch09_{part}", runs, command, copy_to), flush=True)
    if save_results and quick:
        print(
            "[ch09] wrote",
            save("ch09_quick", [r for p in parts for r in recorded[p]], command, copy_to),
            flush=True,
        )
    print(f"[ch09] done in {time.monotonic() - start:.0f} s", flush=True)
    return recorded


SPEC = cli.Recorder(
    "ch09",
    "Chapter 9: the quick demos under Colossal-AI's plugins (ResNet, hybrid Llama, NaN, MoE, SP)",
    "ch09_<part>.json (" + ", ".join(PARTS) + ")",
    lambda a: record(
        list(a.only or PARTS), a.quick, a.budget_s, a.record, a.show, a.gpus or NPROC, a.copy_to
    ),
    flags=("quick", "only", "budget_s", "gpus", "copy_to", "show"),
    quick="small runs of every part (ch09_quick.json)",
    only=PARTS,
    budget_s=540,
    gpus=NPROC,
    one_gpu=ONE_GPU_COMMAND,
    one_gpu_budget_s=ONE_GPU_BUDGET_S,
)
