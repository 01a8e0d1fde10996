"""Chapter 6, "When to choose which": the seed's advice as a decision table, each row with its
evidence read from the book's own measurements.

The evidence comes from Chapter 6's recorded comparison and its Gemini re-run, as found by
:mod:`helpers.chapters.ch08_troubleshooting`; a run whose loss check failed is cited as invalid,
not as a speed.
"""

from __future__ import annotations


def _measured(points: list[dict], word: str) -> dict | None:
    return next(
        (p for p in points if word in p["name"] and not p.get("failed") and not p.get("oom")), None
    )


def _cite(p: dict | None) -> str:
    if p is None:
        return "not recorded: python -m helpers.record ch08 --record --only compare"
    text = f"{p['name']}: {p['tokens_per_s'] / 1000:.1f}k tokens/s, MFU {100 * p['mfu']:.1f} %"
    return text if p["valid"] else text + f" — INVALID ({p['reason']}), not counted"


def _gemini_fix(gemini: dict[bool, dict]) -> str:
    """What Chapter 6's part ``gemini`` (the same model under Gemini, asynchronous gradient reduce
    on and off) adds to the evidence, or '' when it is not recorded."""
    on, off = gemini.get(True), gemini.get(False)
    if not (on and off) or any(p.get("failed") or p.get("oom") for p in (on, off)):
        return ""
    if not off["valid"]:
        return f"; with enable_async_reduce=False (part gemini) still INVALID ({off['reason']})"
    default = "valid too" if on["valid"] else f"{on['reason']} again"
    return (
        "; with enable_async_reduce=False (part gemini, same model): "
        f"{off['tokens_per_s'] / 1000:.1f}k tokens/s, "
        f"MFU {100 * off['mfu']:.1f} %, loss within 0.05 of the reference "
        f"(with the default: {default})"
    )


def _ratio_text(ratios: list[dict]) -> str:
    """The ZeRO-2 / FSDP2 ratio at the smallest and the largest micro-batch recorded (the rows of
    :func:`helpers.chapters.ch06_frameworks.ratio_rows`), or '' without both."""
    if len(ratios) < 2:
        return ""

    def per_gpu(r: dict) -> int:
        return r["sequences per GPU"]

    low, high = min(ratios, key=per_gpu), max(ratios, key=per_gpu)
    return (
        f"; ZeRO-2 {float(low['ZeRO-2 / FSDP2']):.2f}× FSDP2's throughput at "
        f"{low['sequences per GPU']} sequences per GPU ({low['setup']}, FSDP2 reducing in fp32), "
        f"{float(high['ZeRO-2 / FSDP2']):.3f}× at {high['sequences per GPU']} with the same "
        "knobs in both (Chapter 8): parity, the ratio depends on the micro-batch"
    )


def decision_rows(
    points: list[dict] | None = None,
    gemini: dict[bool, dict] | None = None,
    ratios: list[dict] | None = None,
) -> list[dict]:
    """The seed's "when to choose which", each row with its evidence read from Chapter 6's recorded
    comparison (``ch08_compare``: 0.94 B Llama, batch 8 × 2048, bf16, 2 GPUs) and its Gemini re-run
    with and without the asynchronous gradient reduce (``ch08_gemini``, keyed by
    ``enable_async_reduce``), and the ZeRO-2 / FSDP2 ratio at each recorded micro-batch
    (``ratios``, :func:`helpers.chapters.ch06_frameworks.ratio_rows`). Default: the records found
    by :mod:`helpers.chapters.ch08_troubleshooting` and :mod:`helpers.chapters.ch06_frameworks`;
    with ``points`` given and ``gemini`` or ``ratios`` not, neither is cited."""
    if points is None:
        from helpers.chapters.ch06_frameworks import ratio_rows
        from helpers.chapters.ch08_troubleshooting import gemini_points, points as recorded_points

        points, gemini = recorded_points("compare"), gemini_points() if gemini is None else gemini
        ratios = ratio_rows() if ratios is None else ratios
    fsdp, zero = _measured(points, "FSDP2"), _measured(points, "LowLevelZero")
    tp, gemini_run = _measured(points, "tp=2"), _measured(points, "Gemini")
    fix = _gemini_fix(gemini or {})
    ratio = _ratio_text(ratios or []) or (
        f"; ZeRO-2 {zero['tokens_per_s'] / fsdp['tokens_per_s']:.2f}× FSDP2's throughput "
        "in the same run"
        if fsdp and zero and fsdp["valid"] and zero["valid"]
        else ""
    )
    return [
        {
            "situation": "the model fits one GPU once its model states are sharded over "
            "data parallelism",
            "choose": "ZeRO-1/2 (DeepSpeed ZeRO, Colossal-AI LowLevelZero, "
            "Megatron's distributed optimizer) "
            "or PyTorch FSDP2",
            "evidence": f"{_cite(zero)}; {_cite(fsdp)}{ratio}",
        },
        {
            "situation": "the model states do not fit even sharded over data parallelism, "
            "or must go to CPU memory",
            "choose": "ZeRO-3 with placement / offload: Colossal-AI Gemini, "
            "DeepSpeed ZeRO-3 offload"
            + (
                " (Gemini with enable_async_reduce=False: see the evidence)"
                if fix and gemini[False]["valid"] and not gemini[True]["valid"]
                else ""
            ),
            "evidence": f"{_cite(gemini_run)}{fix}; memory per layout in Chapter 7",
        },
        {
            "situation": "one layer's weights or activations do not fit one GPU "
            "(tens to hundreds of billions)",
            "choose": "tensor (+ sequence) parallelism inside a node: Megatron-LM, "
            "or Colossal-AI HybridParallel",
            "evidence": _cite(tp)
            + (
                f"; {tp['tokens_per_s'] / zero['tokens_per_s']:.2f}× ZeRO-2's throughput, "
                f"peak {tp['peak_gib']:.1f} against {zero['peak_gib']:.1f} GiB: TP is for layers "
                "that do not fit, not for speed"
                if tp and zero and tp["valid"] and zero["valid"]
                else ""
            ),
        },
        {
            "situation": "one configuration for TP, PP, SP and ZeRO together, "
            "Hugging Face models as they are",
            "choose": "Colossal-AI (plugins + shardformer policies)",
            "evidence": "Chapter 4's config → plugin mapping and this chapter's converters (tests)",
        },
        {
            "situation": "pure data parallelism, no new framework wanted",
            "choose": "PyTorch FSDP2 (fully_shard)",
            "evidence": _cite(fsdp),
        },
    ]
