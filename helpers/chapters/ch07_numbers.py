"""Chapter 7's numbers, computed for the notebook to print, check and glue onto the page.

:func:`model_numbers` needs no record: the seed's rule, the ZeRO paper's check, the activation
count of the chapter's Llama, the loss term and Gemini's chunks. :func:`technique_numbers` reads
the two-GPU record (``results/2x…/ch07_memory.json``): how well the model predicts each layout
and what each technique costs against plain fp32 data parallelism. :func:`one_gpu_numbers` sets
the one-GPU record beside it. :func:`history_rows` and :func:`not_measured_rows` are for the
appendix: the model's error when each run was recorded, and why a layout has no measurement.
Keys are ``ch07-…``; values are unrounded (the page formats them).
"""

from __future__ import annotations

GIB = 2**30
TOKENS, SEQ = 4 * 1024, 1024  # the chapter's micro-batch: 4 sequences of 1,024 tokens per rank


def model_numbers() -> dict:
    """Numbers of the memory model alone, for the chapter's Llama (``CH07_SHAPE``)."""
    from helpers.cost import memory
    from helpers.cost.chunks import gemini_chunks, parameter_sizes
    from helpers.cost.memory_llama import layer_activation_bytes
    from helpers.parallel.train_layout import CH07_SHAPE as shape

    def per_token_h(e: int, attn: str = "sdpa") -> float:
        return layer_activation_bytes(shape, TOKENS, SEQ, e, attn=attn) / TOKENS / shape.hidden

    bf16, eager = per_token_h(2), per_token_h(2, "eager")
    # eager attention's core (the s² softmax and its copy) replaces sdpa's output and lse
    sdpa_core = 2 + 4 * shape.heads / shape.hidden  # e·bsh + 4·bsa, per token and h
    eager_core = eager - bf16 + sdpa_core
    loss = 12 * TOKENS * shape.vocab  # 12·b·s·v bytes at the start of backward
    chunk, chunks = gemini_chunks(shape, 2)
    params = sum(parameter_sizes(shape))
    paper = [sum(memory.model_states(7.5e9, "bf16", z, dp=64)) / 1e9 for z in range(4)]
    return {
        "ch07-seed-one-gb": memory.seed_estimate_memory(7, 1, 1),
        "ch07-seed-tp-gb": memory.seed_estimate_memory(7, 4, 2),
        **{f"ch07-paper-zero{z}-gb": v for z, v in enumerate(paper)},
        "ch07-bf16-h": bf16,
        "ch07-fp32-h": per_token_h(4),
        "ch07-eager-h": eager,
        "ch07-eager-core-h": eager_core,
        "ch07-eager-ratio": eager_core / (bf16 - sdpa_core),
        "ch07-loss-gib": loss / GIB,
        "ch07-loss-layers": loss / layer_activation_bytes(shape, TOKENS, SEQ, 2),
        "ch07-params-m": params / 1e6,
        "ch07-gemini-chunk-m": chunk / 1e6,
        "ch07-gemini-chunks": chunks,
        "ch07-gemini-pad-pct": 100 * (chunk * chunks / params - 1),
        # Chapter 3's earlier planner: Llama-2-70B, D = 128 x T = 8, ZeRO-1, bf16 gradients held
        "ch07-70b-held-gib": memory.model_states(70e9, "bf16", 1, dp=128, tp=8)[1] / GIB,
    }


def _by_name(record: dict) -> dict:
    from helpers.record.ch07_tables import measured_rows

    return {r["layout"]: r for r in measured_rows(record)}


def _phases(record: dict) -> dict:
    """name -> the recorded phases of the rank that used most."""
    from helpers.record.ch07_tables import rank_results

    out = {}
    for run in record["runs"]:
        ranks = rank_results(run)
        if ranks and all(r.get("measured") for r in ranks):
            out[run["name"]] = max(ranks, key=lambda r: r["measured"]["peak"])["phases"]
    return out


def technique_numbers(record: dict) -> dict:
    """The two-GPU record read as the page states it: the model's worst errors, what the
    allocator does not count, and each technique's peak and speed against fp32 DDP."""
    from helpers.parallel.train_layout import CH07_SHAPE as shape

    m, phases = _by_name(record), _phases(record)
    base = m["DDP fp32"]

    def mem(name: str) -> float:
        return m[name]["measured"] / base["measured"]

    def speed(name: str, against: str = "DDP fp32") -> float:
        return m[name]["tokens_per_s"] / m[against]["tokens_per_s"]

    worst = max(m.values(), key=lambda r: abs(r["error_pct"]))
    cache = [(r["peak_reserved"] - r["measured"]) / GIB for r in m.values()]
    outside = [r["outside_allocator"] / GIB for r in m.values()]
    zero1, zero2, offload = "ZeRO-1 bf16", "ZeRO-2 bf16", "ZeRO-2 bf16 + CPU offload"
    recompute, gemini = "ZeRO-1 bf16 + recompute", "Gemini bf16 (static)"
    return {
        "ch07-layouts": len(m),
        "ch07-within-pct": max(abs(r["error_pct"]) for r in m.values()),
        "ch07-worst-layout": worst["layout"],
        "ch07-pp-pct": -m["PP=2 bf16 (1F1B, 4 micro-batches)"]["error_pct"],
        "ch07-gemini-pct": -m[gemini]["error_pct"],
        "ch07-outside-lo-gib": min(outside),
        "ch07-outside-hi-gib": max(outside),
        "ch07-cache-lo-gib": min(cache),
        "ch07-cache-hi-gib": max(cache),
        "ch07-bf16-mem": mem("DDP bf16 (Hybrid tp=1)"),
        "ch07-bf16-speed": speed("DDP bf16 (Hybrid tp=1)"),
        "ch07-states-ddp-gib": phases["DDP fp32"]["start"]["allocated"] / GIB,
        "ch07-states-zero-gib": phases[zero1]["start"]["allocated"] / GIB,
        "ch07-zero-mem": mem(zero1),
        "ch07-zero2-mem": mem(zero2),
        "ch07-zero1-step-gib": phases[zero1]["step"]["peak"] / GIB,
        "ch07-zero2-step-gib": phases[zero2]["step"]["peak"] / GIB,
        "ch07-zero-speed": speed(zero1),
        "ch07-zero2-speed": speed(zero2),
        "ch07-recompute-gib": m[recompute]["measured"] / GIB,
        "ch07-recompute-mem": mem(recompute),
        "ch07-recompute-loss-share": 12 * TOKENS * shape.vocab / m[recompute]["measured"],
        "ch07-recompute-slower-pct": 100 * (1 - speed(recompute, zero1)),
        "ch07-recompute-vs-zero1": speed(recompute, zero1),
        "ch07-offload-mem": mem(offload),
        "ch07-offload-speed": speed(offload),
        "ch07-offload-vs-zero2": speed(offload, zero2),
        "ch07-offload-params-m": _rank_params(record, offload) / 1e6,
        "ch07-gemini-gib": m[gemini]["measured"] / GIB,
        "ch07-gemini-mem": mem(gemini),
        "ch07-gemini-speed": speed(gemini),
        "ch07-gemini-offload-gib": m["Gemini bf16 + offload"]["measured"] / GIB,
        "ch07-gemini-offload-mem": mem("Gemini bf16 + offload"),
        "ch07-gemini-offload-speed": speed("Gemini bf16 + offload"),
        "ch07-gemini-auto-gib": m["Gemini bf16 (auto)"]["measured"] / GIB,
        "ch07-gemini-auto-speed": speed("Gemini bf16 (auto)"),
        "ch07-eager-more-gib": (
            m["ZeRO-2 bf16, eager attention"]["measured"] - m[zero2]["measured"]
        )
        / GIB,
        "ch07-mb8-more-gib": (m["ZeRO-2 bf16, micro-batch 8"]["measured"] - m[zero2]["measured"])
        / GIB,
        "ch07-mb8-faster-pct": 100 * (speed("ZeRO-2 bf16, micro-batch 8", zero2) - 1),
    }


def technique_report(x: dict) -> str:
    """What the page says of the techniques, in numbers of :func:`technique_numbers` (``x``)."""
    return "\n".join(
        [
            f"faster than fp32 DDP: bf16 only ({x['ch07-bf16-speed']:.2f} times its throughput)",
            f"ZeRO-1 and ZeRO-2 peaks: {x['ch07-zero-mem']:.3f} and {x['ch07-zero2-mem']:.3f} "
            "of fp32 DDP",
            f"optimizer step: ZeRO-2 {x['ch07-zero2-step-gib']:.2f} GiB, "
            f"ZeRO-1 {x['ch07-zero1-step-gib']:.2f} GiB",
            f"recompute: {x['ch07-recompute-vs-zero1']:.2f} of ZeRO-1's speed; "
            f"the loss term is {x['ch07-recompute-loss-share']:.2f} of its peak",
            f"CPU offload: {x['ch07-offload-vs-zero2']:.2f} of ZeRO-2's speed",
        ]
    )


def _rank_params(record: dict, name: str) -> float:
    """Parameters one rank updates under a ZeRO layout of the record: Ψ / D."""
    from helpers.cost.chunks import parameter_sizes
    from helpers.parallel.train_layout import TrainLayout
    from helpers.record.ch07_tables import rank_results

    run = next(r for r in record["runs"] if r["name"] == name)
    layout = TrainLayout.from_dict(rank_results(run)[0]["layout"])
    return sum(parameter_sizes(layout.shape)) / layout.dp


def one_gpu_numbers(one: dict, two: dict) -> dict:
    """The one-GPU record beside the two-GPU one: the peaks it measured, the model's worst error
    there, and what ZeRO-2 needs more on one GPU, where it shards nothing."""
    m1, m2 = _by_name(one), _by_name(two)
    return {
        "ch07-one-measured": sum(", accumulation" not in n for n in m1),
        "ch07-one-ddp-gib": m1["DDP fp32"]["measured"] / GIB,
        "ch07-one-bf16-gib": m1["DDP bf16 (Hybrid tp=1)"]["measured"] / GIB,
        "ch07-one-zero2-gib": m1["ZeRO-2 bf16"]["measured"] / GIB,
        "ch07-one-worst-pct": max(
            abs(r["error_pct"]) for n, r in m1.items() if ", accumulation" not in n
        ),
        "ch07-one-zero2-more-gib": (m1["ZeRO-2 bf16"]["measured"] - m2["ZeRO-2 bf16"]["measured"])
        / GIB,
    }


def history_rows(record: dict) -> list[dict]:
    """For the appendix: each layout's error when it was recorded (the model of that day) and
    today's."""
    return [
        {
            "layout": r["layout"],
            "error % at recording": "—"
            if r["error_pct_at_recording"] is None
            else f"{r['error_pct_at_recording']:+.1f}",
            "error % today": f"{r['error_pct']:+.1f}",
        }
        for r in _by_name(record).values()
    ]


def page_world_rows(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """:func:`helpers.record.ch07_world.world_rows` split for the reader: the page's table (peaks,
    predictions and errors; a layout one box did not measure says "not measured", or "needs 2
    GPUs") and, for the appendix, why each missing measurement is missing."""
    page, why = [], []
    for row in rows:
        out = {}
        for key, value in row.items():
            if "tokens/s" in key or key == "note":
                continue
            if isinstance(value, str) and value.startswith(("not run", "failed")):
                why.append({"layout": row["layout"], "box": key.split()[0], "why": value})
                value = (
                    "needs 2 GPUs"
                    if "needs 2 GPUs" in value
                    else "as ZeRO-2 (one rank holds every shard)"
                    if "the same layout as" in value
                    else "not measured"
                )
            out[key] = value
        page.append(out)
    return page, why
