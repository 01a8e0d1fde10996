"""Chapter 1's Colossal-AI runs on GPUs: the layouts, running them, recording and showing them.

Record on a box with two or more GPUs (results/<hardware>/ch01_hybrid.json):

    python -m helpers.record.ch01 --record
"""

from __future__ import annotations

import argparse
import shlex

from helpers.run.launch import launch, torchrun_command
from helpers.record.results import format_table, load, save

NPROC = 2
HYBRID_LAYOUTS = {
    "tp=2": ["--tp", "2"],
    "pp=2 (1F1B, 2 micro-batches)": ["--pp", "2", "--microbatches", "2"],
    "sp=2 all_to_all (Ulysses)": ["--sp", "2", "--sp_mode", "all_to_all"],
    "tp=2 + split_gather SP": ["--tp", "2", "--sp_mode", "split_gather"],
    "dp=2 ZeRO-1 bf16": ["--zero", "1", "--precision", "bf16"],
    "tp=2 bf16": ["--tp", "2", "--precision", "bf16"],
    "TRAP sp=2 all_to_all, sdpa": [
        "--sp",
        "2",
        "--sp_mode",
        "all_to_all",
        "--attn",
        "sdpa",
        "--expect_drift",
    ],
}


def run_hybrid_layouts(show: str = "none") -> list[dict]:
    """Launch every layout on NPROC GPUs; each checks its own loss against a reference."""
    runs = []
    for name, args in HYBRID_LAYOUTS.items():
        result = launch("ch01_hybrid", NPROC, args, timeout_s=300, show=show)
        last = next(r for r in result.results if "losses" in r)  # a last-stage rank
        runs.append(
            {
                "name": name,
                "args": args,
                "seconds": round(result.seconds, 1),
                "command": shlex.join(torchrun_command("ch01_hybrid", NPROC, args)),
                **last,
            }
        )
    return runs


def hybrid_rows(runs: list[dict]) -> list[dict]:
    """The table the chapter shows: one row per layout."""
    return [
        {
            "layout": r["name"],
            "precision": r["precision"],
            "attention": r["attn"],
            "loss first→last": f"{r['losses'][0]:.3f}→{r['losses'][-1]:.3f}",
            "reference": f"{r['reference'][0]:.3f}→{r['reference'][-1]:.3f}",
            "max |Δloss| (steps checked)": f"{r['max_diff']:.1e} ({r['checked_steps']})",
            "tokens/s": r["tokens_per_s"],
            "peak MiB": r["peak_mib"],
        }
        for r in runs
    ]


def show_recorded() -> str:
    """The recorded GPU table with its provenance (what a CPU reader sees)."""
    from helpers.record.results import describe

    record = load("ch01_hybrid")
    return (
        describe(record)
        + "\n\n"
        + format_table(hybrid_rows(record["runs"]), list(hybrid_rows(record["runs"])[0]))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--record", action="store_true", help="write results/<hardware>/ch01_hybrid.json"
    )
    args = parser.parse_args()
    runs = run_hybrid_layouts(show="all")
    rows = hybrid_rows(runs)
    print(format_table(rows, list(rows[0])))
    if args.record:
        print("wrote", save("ch01_hybrid", runs, "python -m helpers.record.ch01 --record"))


if __name__ == "__main__":
    main()
