"""Chapter 8, "The flagship run: 54 % MFU on two H200s": each tuning step, and the head-to-head.

Used by ``notebooks/08_troubleshooting.ipynb`` (the head-to-head's figure is
:func:`helpers.figures.ch08_flagship.h2h_figure`). A step's measured effect compares two runs of one
record (``flagship.json``, the run list; ``flagship_h2h.json``, the best runs alternated in
rounds), recomputed with :func:`helpers.record.flagship_summary.summarize` and
:func:`helpers.record.flagship_summary.compare`.
"""

from __future__ import annotations

from helpers.record.flagship_summary import compare, summarize


STEPS = {  # run -> the run it changes one knob of (the tuning story's previous step)
    "+ reduce buckets 12 → 128 M elements": "LowLevelZero ZeRO-2, eager",
    "+ torch.compile per layer": "+ reduce buckets 12 → 128 M elements",
    "+ fused torch AdamW instead of HybridAdam": "+ torch.compile per layer",
    "+ micro-batch 8 → 16": "+ fused torch AdamW instead of HybridAdam",
    "+ overlap the parameter all-gather": "+ micro-batch 8 → 16",
    "+ gradient norm kept on the GPU (no host sync in step)": "+ overlap the parameter all-gather",
    "ZeRO-2 → ZeRO-1 (all-reduce, no gradient shards)": "+ micro-batch 8 → 16",
    "FSDP2 + torch.compile per layer": "FSDP2, eager",
    "FSDP2 + torch.compile + fused AdamW": "FSDP2 + torch.compile per layer",
    "FSDP2 + torch.compile, micro-batch 16": "FSDP2 + torch.compile + fused AdamW",
}


def _speeds(record: dict) -> dict[str, dict]:
    """name -> {tokens/s per GPU, MFU} of each valid run; a head-to-head's runs by their medians."""
    rows = [summarize(r["name"], r) for r in record["runs"]]
    if any(r["name"] != r["name"].split(" · round ")[0] for r in rows):
        return {
            g["name"]: {
                "tps": g["median"],
                "mfu": g["mfu_median"],
                "record": "head-to-head (median)",
            }
            for g in compare(rows)
            if g["valid"]
        }
    return {
        r["name"]: {"tps": r["tokens_per_s_per_gpu"], "mfu": r["mfu"], "record": "run list"}
        for r in rows
        if r["ok"] and r["loss_ok"]
    }


def step_rows(*records: dict) -> list[dict]:
    """Each tuning step's measured effect: MFU before and after and the throughput ratio.

    A step is computed only where the run and the run it changes are in the same record (measured
    minutes apart on the same machine); across records the row says why it is missing."""
    per_record = [_speeds(r) for r in records]
    rows = []
    for run, before in STEPS.items():
        same = next((s for s in per_record if run in s and before in s), None)
        if same is None:
            if any(run in s for s in per_record):
                rows.append(
                    {
                        "step": run,
                        "from": before,
                        "MFU % before": "—",
                        "MFU % after": "—",
                        "throughput ×": "not in one record",
                    }
                )
            continue
        a, b = same[before], same[run]
        rows.append(
            {
                "step": run,
                "from": before,
                "MFU % before": f"{100 * a['mfu']:.1f}",
                "MFU % after": f"{100 * b['mfu']:.1f}",
                "throughput ×": f"{b['tps'] / a['tps']:.3f}",
                "record": b["record"],
            }
        )
    return rows


H2H_COLUMNS = [
    "name",
    "rounds",
    "tokens/s/GPU per round",
    "median",
    "MFU % (median)",
    "MFU % all params (median)",
    "spread %",
    "vs FSDP2",
    "losses ok",
]


def h2h_rows(record: dict) -> list[dict]:
    """The head-to-head as a table: every round's tokens/s per GPU, the median and its ratio to
    FSDP2's."""
    groups = compare([summarize(r["name"], r) for r in record["runs"]])
    return [
        {
            "name": g["name"],
            "rounds": g["rounds"],
            "tokens/s/GPU per round": ", ".join(f"{t:,}" for t in g["tokens_per_s_per_gpu"]),
            "median": f"{g['median']:,.0f}",
            "MFU % (median)": f"{100 * g['mfu_median']:.1f}",
            "MFU % all params (median)": f"{100 * g['mfu_all_params_median']:.1f}",
            "spread %": f"{100 * g['spread']:.2f}",
            "vs FSDP2": f"{g['vs_fsdp2']:.4f}" if g["vs_fsdp2"] else "—",
            "losses ok": "yes" if g["valid"] else "NO",
        }
        for g in groups
        if g["median"]
    ]
