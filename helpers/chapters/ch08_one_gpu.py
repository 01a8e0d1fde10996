"""Chapter 8, "The flagship run: 54 % MFU on two H200s", on one GPU: beside the 2-GPU runs.

Used by ``notebooks/08_troubleshooting.ipynb``. :func:`world_rows` puts the one-GPU record
(``--gpus 1``, results/1x…/flagship.json) beside the runs of results/2x…/flagship.json (or the
head-to-head's medians) that it repeats.
"""

from __future__ import annotations

from helpers.chapters.ch08_flagship import recorded, setup
from helpers.record.flagship import ONE_GPU_COMMAND
from helpers.record.flagship_runs import WORLD1_RUNS
from helpers.record.flagship_summary import compare, summarize
from helpers.record.results import box_label


WORLD_COLUMNS = [
    "run",
    "box",
    "setup",
    "tokens/s/GPU",
    "MFU %",
    "peak GiB",
    "loss after n steps",
    "max |Δ ref|",
    "loss ok",
    "1 GPU / 2 GPUs (tokens/s per GPU)",
    "source",
]


def _side(s: dict | None, box: str, source: str) -> dict:
    if s is None:
        return {"box": box, "tokens/s/GPU": "—", "source": source}
    if not s["ok"]:
        return {
            "box": box,
            "setup": "",
            "tokens/s/GPU": "failed",
            "loss ok": s["error"].strip().splitlines()[-1][:80],
            "source": source,
        }
    return {
        "box": box,
        "setup": setup(s),
        "tokens/s/GPU": f"{s['tokens_per_s_per_gpu']:,}",
        "MFU %": f"{100 * s['mfu']:.1f}",
        "peak GiB": s["peak_gib"],
        "loss after n steps": s["loss_last"],
        "max |Δ ref|": s["max_ref_gap"],
        "loss ok": "yes" if s["loss_ok"] else "NO",
        "source": source,
    }


def _h2h_median(h2h: dict | None, name: str) -> dict | None:
    """A head-to-head run as one summary row: its first valid round's fields with the medians'
    speed."""
    if h2h is None:
        return None
    rounds = [summarize(r["name"], r) for r in h2h["runs"]]
    group = next((g for g in compare(rounds) if g["name"] == name and g["median"]), None)
    if group is None:
        return None
    first = next(r for r in rounds if r["name"].split(" · round ")[0] == name and r["ok"])
    return {
        **first,
        "name": name,
        "tokens_per_s_per_gpu": round(group["median"]),
        "mfu": group["mfu_median"],
        "loss_ok": group["valid"],
        "rounds": group["rounds"],
    }


def world_rows(
    one: dict | None = None, two: dict | None = None, h2h: dict | None = None
) -> list[dict]:
    """The one-GPU flagship runs beside the 2-GPU runs they repeat
    (:data:`helpers.record.flagship_runs.WORLD1_RUNS`): two rows per run, 2×H200 then 1×H200
    (tokens/s per GPU, MFU, peak, loss against the reference), the second with its throughput per
    GPU over the 2-GPU one's. The 2-GPU side comes from the run list (``two``, default
    results/2x…/flagship.json) or, for a run only the head-to-head has, from its median over the
    rounds (``h2h``). Without a one-GPU record its row says "not recorded yet on 1×H200" and gives
    the command."""
    one = one if one is not None else recorded("flagship", gpus=1)
    two = two if two is not None else recorded("flagship", gpus=2)
    h2h = h2h if h2h is not None else recorded("flagship_h2h", gpus=2)
    box1, box2 = box_label(one, 1), box_label(two or h2h, 2)
    ones = {r["name"]: summarize(r["name"], r) for r in (one or {}).get("runs", [])}
    twos = {r["name"]: summarize(r["name"], r) for r in (two or {}).get("runs", [])}
    rows = []
    for name, _, beside in WORLD1_RUNS:
        s2, source2 = twos.get(beside), "run list"
        if s2 is None or not s2["ok"]:
            median = _h2h_median(h2h, beside)
            if median is not None:
                s2, source2 = median, f"head-to-head, median of {median['rounds']} rounds"
        row2 = {"run": beside, **_side(s2, box2, source2 if s2 else "not in the 2-GPU records")}
        if one is None:
            row1 = {
                "run": name,
                "box": box1,
                "tokens/s/GPU": f"not recorded yet on {box1}",
                "source": f"record it with: {ONE_GPU_COMMAND}",
            }
        else:
            s1 = ones.get(name)
            row1 = {
                "run": name,
                **_side(s1, box1, "run list" if s1 else f"not in the {box1} record"),
            }
            if s1 and s1["ok"] and s2 and s2["ok"]:
                row1["1 GPU / 2 GPUs (tokens/s per GPU)"] = (
                    f"{s1['tokens_per_s_per_gpu'] / s2['tokens_per_s_per_gpu']:.3f}"
                )
        rows += [row2, row1]
    return rows


def one_gpu_status(one: dict | None = None) -> str:
    """The one-GPU record's provenance, or that it is not recorded yet and the command that makes
    it."""
    from helpers.record.results import describe

    one = one if one is not None else recorded("flagship", gpus=1)
    if one is None:
        return f"flagship: not recorded yet on 1×H200. On a machine with one GPU: {ONE_GPU_COMMAND}"
    return describe(one)
