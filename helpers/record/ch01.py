"""Chapter 1's Colossal-AI runs on GPUs: the layouts, running them, recording and showing them.

Record on a box with two or more GPUs (results/<hardware>/ch01_hybrid.json):

    python -m helpers.record ch01 --record
"""

from __future__ import annotations


from helpers.parallel.degrees import degree_flags
from helpers.record import cli
from helpers.record.results import describe, format_table, load, save
from helpers.record.runner import run_one, status

NPROC = 2
HYBRID_LAYOUTS = {
    "tp=2": degree_flags(tensor=2),
    "pp=2 (1F1B, 2 micro-batches)": [*degree_flags(pipeline=2), "--microbatches", "2"],
    "sp=2 all_to_all (Ulysses)": degree_flags(sequence=2, sequence_mode="all_to_all"),
    "tp=2 + split_gather SP": degree_flags(tensor=2, sequence_mode="split_gather"),
    "dp=2 ZeRO-1 bf16": ["--zero", "1", "--precision", "bf16"],
    "tp=2 bf16": [*degree_flags(tensor=2), "--precision", "bf16"],
    "TRAP sp=2 all_to_all, sdpa": [
        *degree_flags(sequence=2, sequence_mode="all_to_all"),
        *"--attn sdpa --expect_drift".split(),
    ],
}


def run_hybrid_layouts(show: str = "none") -> list[dict]:
    """Launch every layout on NPROC GPUs; each checks its own loss against a reference. A layout
    that fails is kept as a record with its error (:func:`helpers.record.runner.run_one`)."""
    return [
        run_one(name, "ch01_hybrid", NPROC, args, 300, show, beat=False)
        for name, args in HYBRID_LAYOUTS.items()
    ]


def layout_result(run: dict) -> dict | None:
    """A layout's result: its last-stage rank's (the one that reports the losses), or None when it
    failed. An earlier record keeps those fields in the run itself."""
    if "losses" in run:
        return run
    return next((r for r in run.get("results", []) if "losses" in r), None) if run["ok"] else None


def hybrid_rows(runs: list[dict]) -> list[dict]:
    """The table the chapter shows: one row per layout."""
    rows = []
    for run in runs:
        r = layout_result(run)
        if r is None:
            rows.append({"layout": run["name"], "loss first→last": status(run)})
            continue
        rows.append(
            {
                "layout": run["name"],
                "precision": r["precision"],
                "attention": r["attn"],
                "loss first→last": f"{r['losses'][0]:.3f}→{r['losses'][-1]:.3f}",
                "reference": f"{r['reference'][0]:.3f}→{r['reference'][-1]:.3f}",
                "max |Δloss| (steps checked)": f"{r['max_diff']:.1e} ({r['checked_steps']})",
                "tokens/s": r["tokens_per_s"],
                "peak MiB": r["peak_mib"],
            }
        )
    return rows


def columns(rows: list[dict]) -> list[str]:
    """Every column of the rows, in order of first appearance."""
    return list(dict.fromkeys(k for r in rows for k in r))


def show_recorded() -> str:
    """The recorded GPU table with its provenance (what a CPU reader sees)."""
    record = load("ch01_hybrid")
    return (
        describe(record)
        + "\n\n"
        + format_table(hybrid_rows(record["runs"]), columns(hybrid_rows(record["runs"])))
    )


def _record(args) -> None:
    runs = run_hybrid_layouts(show="all")
    rows = hybrid_rows(runs)
    print(format_table(rows, columns(rows)))
    if args.record:
        print("wrote", save("ch01_hybrid", runs, cli.command("ch01", ["--record"])))


SPEC = cli.Recorder(
    "ch01",
    "Chapter 1: HybridParallelPlugin layouts on 2 GPUs, each against its single-GPU loss",
    "ch01_hybrid.json",
    _record,
)
