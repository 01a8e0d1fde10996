"""Chapter 9, "Hybrid parallelism: a Llama under HybridParallelPlugin": each layout's numbers.

Throughput, MFU, peak memory and losses of each recorded layout, and the model's FLOPs per token.
Used by ``notebooks/09_quick_demos.ipynb`` (the table, and the bars of :func:`hybrid_bars` that
:func:`helpers.figures.ch09_hybrid.hybrid_figure` draws) and by
:mod:`helpers.chapters.ch02_combining` (the slowest rank, MFU).
"""

from __future__ import annotations

from helpers.chapters.ch09_records import failure_line, first_rank


def mfu_of(result: dict) -> float:
    """MFU recomputed with the book's definition (``helpers.demos.ch09_hybrid.mfu``, i.e.
    ``helpers.cost.mfu``) from the recorded tokens/s, GPU count, preset and length; the recorded
    ``mfu`` (rounded to 4 digits) where the result does not name its preset."""
    if "preset" not in result or "seq" not in result:
        return result["mfu"]
    from helpers.train.presets import PRESETS, mfu
    from helpers.models.llama import llama_config

    config = llama_config(**PRESETS[result["preset"]], max_seq=result["seq"])
    return mfu(config, result["seq"], result["tokens_per_s"], result["gpus"])


def slowest(run: dict) -> dict:
    """The result line of the rank with the fewest tokens/s: a step ends when every rank's does."""
    return min(
        (r for r in run.get("results", []) if "tokens_per_s" in r), key=lambda r: r["tokens_per_s"]
    )


def peak_gib(run: dict) -> float:
    """The largest peak memory of any rank of a run (pipeline stages differ), in GiB."""
    return max(r["peak_mib"] for r in run.get("results", []) if "peak_mib" in r) / 1024


def hybrid_rows(runs: list[dict]) -> list[dict]:
    rows = []
    for run in runs:
        r = first_rank(run)
        if "tokens_per_s" not in r:
            rows.append({"layout": run["name"], "tokens/s": failure_line(run)})
            continue
        ref, speed = r.get("reference") or [], slowest(run)
        rows.append(
            {
                "layout": run["name"],
                "GPUs": r["gpus"],
                "tokens/s (slowest rank)": f"{speed['tokens_per_s']:,}",
                "MFU": f"{100 * mfu_of(speed):.1f} %",
                "peak GiB (largest rank)": f"{peak_gib(run):.1f}",
                "loss first→last": f"{r['losses'][0]:.3f}→{r['losses'][-1]:.3f}",
                f"max |Δ| vs reference ({len(ref)} steps)": f"{r['max_diff']:.1e}"
                if ref
                else "n/a",
            }
        )
    return rows


def hybrid_bars(runs: list[dict]) -> list[dict]:
    """Per layout that ran, what :func:`helpers.figures.ch09_hybrid.hybrid_figure` draws: its
    GPUs and its slowest rank's tokens/s and MFU (:func:`slowest`, :func:`mfu_of`)."""
    done = [(run["name"], slowest(run)) for run in runs if "tokens_per_s" in first_rank(run)]
    return [
        {"name": name, "gpus": r["gpus"], "tokens_per_s": r["tokens_per_s"], "mfu": mfu_of(r)}
        for name, r in done
    ]


def flops_numbers(config, flops: float, peak: float, gpus: int = 2) -> dict:
    """The glued size of the chapter's Llama (``config``) and its ``flops`` per token: parameters
    and Ψ_mm (without the embedding) in billions, the embedding in millions, GFLOP per token
    without and with the embedding's 6·V·h, and the tokens/s of 100 % MFU on ``gpus`` GPUs of
    ``peak`` FLOP/s."""
    from helpers.models.llama import llama_params  # torch

    params, embedding = llama_params(config), config.vocab_size * config.hidden_size
    return {
        "ch09-params-b": params / 1e9,
        "ch09-psi-mm-b": (params - embedding) / 1e9,
        "ch09-gflop": flops / 1e9,
        "ch09-full-mfu-tokens": gpus * peak / flops,
        "ch09-embedding-m": embedding / 1e6,
        "ch09-gflop-with-embedding": (flops + 6 * embedding) / 1e9,
    }
