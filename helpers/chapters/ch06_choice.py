"""Chapter 6, "Which one would I pick in 2026": the guide's claims, the decision table and the
picks, each with its evidence computed from the book's own runs.

:func:`decision_rows` is the guide's "when to choose which", its evidence read from the recorded
comparison, the ratio table and the Gemini re-run (a run whose loss check failed is cited as
invalid, not as a speed; a speed ratio with the knobs and micro-batch it was measured at).
:func:`claim_rows` checks each claim of the guide's section on the framework ecosystem against a
run, or says why none here can; :func:`pick_rows` is the chapter's answer for 2026.
"""

from __future__ import annotations

from helpers.chapters.ch06_frameworks import ratio_rows
from helpers.chapters.ch08_troubleshooting import gemini_points
from helpers.chapters.ch08_troubleshooting import points as recorded_points


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
    """The ZeRO-2 / FSDP2 ratio with the same knobs in both (the largest micro-batch recorded)
    first, then the one with different knobs (the smallest), from the rows of
    :func:`helpers.chapters.ch06_frameworks.ratio_rows`; '' without both."""
    if len(ratios) < 2:
        return ""

    def per_gpu(r: dict) -> int:
        return r["sequences per GPU"]

    low, high = min(ratios, key=per_gpu), max(ratios, key=per_gpu)
    return (
        f"; with the same knobs in both, ZeRO-2 ran at {float(high['ZeRO-2 / FSDP2']):.3f}× "
        f"FSDP2's throughput at {high['sequences per GPU']} sequences per GPU (Chapter 8): "
        f"parity. Only with different knobs ({low['setup']}, torch's foreach AdamW against "
        f"HybridAdam, FSDP2 reducing in fp32) did ZeRO-2 reach "
        f"{float(low['ZeRO-2 / FSDP2']):.2f}× FSDP2's throughput, at "
        f"{low['sequences per GPU']} sequences per GPU"
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
            "evidence": (ratio[2:] + "; first recording, unequal knobs: " if ratio else "")
            + f"{_cite(zero)}; {_cite(fsdp)}",
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


CLAIM_COLUMNS = ["the guide says", "checked by", "result"]
NOT_HERE = (
    "not run here: tensor parallelism needs two GPUs or more and a layer too large for one "
    "141 GB GPU needs many; this book's runs use one GPU or CPU processes"
)


def claim_rows(ds: dict, points: list[dict] | None = None, h2h: dict | None = None) -> list[dict]:
    """The guide's claims about the three frameworks, each with the run that checks it or why none
    can here. ``ds``: :func:`helpers.chapters.ch06_deepspeed.numbers` plus ``max_gap``;
    ``points``: the recorded two-GPU comparison (default: the book's); ``h2h``: the one-GPU
    head-to-head's numbers (:func:`helpers.chapters.ch06_h2h.numbers`), if recorded."""
    points = recorded_points("compare") if points is None else points
    zero, tp = _measured(points, "LowLevelZero"), _measured(points, "tp=2")
    fits = (
        f"{_cite(zero)}; {_cite(tp)}: ZeRO-2 {zero['tokens_per_s'] / tp['tokens_per_s']:.2f}× "
        f"the throughput of tp = 2 at {zero['peak_gib']:.1f} against {tp['peak_gib']:.1f} GiB"
        if zero and tp and zero["valid"] and tp["valid"]
        else "not recorded"
    )
    if h2h:
        fits += f"; DeepSpeed ZeRO-2 alone on one GPU: {_h2h_text(h2h, 'deepspeed')}"
    return [
        {
            "the guide says": "DeepSpeed's ZeRO shards optimizer states, gradients and parameters "
            "over the data-parallel group, so each GPU keeps a share",
            "checked by": "this chapter's DeepSpeed ZeRO-1, 2 and 3 on two CPU ranks, from the "
            "converter's JSON",
            "result": f"yes: each rank keeps Adam's state for {ds['ch06-ds-adam'] // 2:,} of "
            f"{ds['ch06-ds-psi']:,} parameters, and ZeRO-3 a partition of "
            f"{ds['ch06-ds-partition']:,}; losses within {ds['max_gap']:.0e} of the reference. "
            f"But ZeRO-1/2 all-reduce the gradients, and ZeRO-3 keeps all "
            f"{ds['ch06-ds-persistent']} tensors of this small model whole by default",
        },
        {
            "the guide says": "while the model still fits one GPU, DeepSpeed's ZeRO is enough",
            "checked by": "the two-GPU comparison (a 0.94 B Llama that fits): ZeRO-2 against "
            "tensor parallelism; DeepSpeed's own ZeRO-2 on one GPU in the four-framework "
            "head-to-head",
            "result": fits,
        },
        {
            "the guide says": "for layers too large for one GPU (tens to hundreds of billions of "
            "parameters) Megatron's tensor parallelism is the more proven",
            "checked by": "—",
            "result": NOT_HERE,
        },
        {
            "the guide says": "Colossal-AI puts data, tensor, pipeline and sequence parallelism "
            "and ZeRO under one configuration, with a simpler API",
            "checked by": "Chapter 4's YAML -> plugin, and this chapter's converters: the same "
            "YAML as a DeepSpeed JSON that trains and as Megatron-Core's objects",
            "result": "one configuration: yes (each conversion is run or checked against the "
            "framework's source). 'Simpler' is a judgment no run measures",
        },
    ]


PICK_COLUMNS = ["if you", "pick", "because (the runs)", "what could change it"]
RIVALS = ("colossal", "deepspeed", "megatron")  # each against FSDP2
LABEL = {
    "colossal": "LowLevelZero ZeRO-2",
    "deepspeed": "DeepSpeed ZeRO-2",
    "megatron": "Megatron-Core",
}


def _beyond_spread(h: dict, name: str) -> bool:
    """Whether ``name``'s ratio to FSDP2 differs from 1 by more than both rows' spreads."""
    k = f"ch06-h2h-{name}"
    gap = 100 * abs(1 - h[k + "-vs-fsdp2"])
    return gap > h[k + "-spread"] + h["ch06-h2h-fsdp2-spread"]


def _h2h_text(h: dict, name: str) -> str:
    """One framework's row of the one-GPU head-to-head in words (``h``:
    :func:`helpers.chapters.ch06_h2h.numbers`)."""
    k = f"ch06-h2h-{name}"
    verdict = "a gap beyond the spreads" if _beyond_spread(h, name) else "within the spreads"
    return (
        f"{LABEL[name]} {h[k + '-mfu']:.1f} % MFU at micro-batch {h[k + '-mbs']} on one H200, "
        f"{h[k + '-vs-fsdp2']:.3f}× FSDP2's throughput ({verdict})"
    )


def pick_rows(ds: dict, equal: list[dict], maintenance: dict, h2h: dict | None) -> list[dict]:
    """Which framework this book would pick in 2026, per situation, grounded in its runs: ``ds``
    as for :func:`claim_rows`, ``equal`` the equal-knob rows of
    :func:`helpers.chapters.ch06_frameworks.equal_rows`, ``maintenance`` the checked facts
    (:func:`helpers.chapters.ch06_frameworks.maintenance`), ``h2h`` the one-GPU four-framework
    head-to-head's numbers (:func:`helpers.chapters.ch06_h2h.numbers`) or None while it is not
    recorded."""
    parity = "; ".join(
        f"{r['GPUs']} GPU{'s' if r['GPUs'] > 1 else ''}: {r['ZeRO-2 / FSDP2']}× "
        f"({r['lead'].split(':')[0]})"
        for r in equal
    )
    cai = maintenance["frameworks"]["Colossal-AI"]
    ds_release = maintenance["frameworks"]["DeepSpeed"]["release"]["value"]
    decide = "the four-framework comparison"
    seen = {n: f"; one GPU, best levers each: {_h2h_text(h2h, n)}" if h2h else "" for n in RIVALS}
    return [
        {
            "if you": "train a Hugging Face model with data parallelism and sharding on one node",
            "pick": "PyTorch FSDP2",
            "because (the runs)": "at parity with LowLevelZero ZeRO-2 given equal knobs "
            f"({parity}){seen['colossal']}; it moves with torch itself",
            "what could change it": "a lead beyond the spread at two GPUs or more",
        },
        {
            "if you": "need ZeRO-3 or offload to CPU/NVMe from a config file",
            "pick": "DeepSpeed",
            "because (the runs)": "ZeRO-1, 2 and 3 trained this book's YAML to the reference "
            f"(within {ds['max_gap']:.0e}){seen['deepspeed']}; released {ds_release}",
            "what could change it": "its speed at two GPUs or more, beside FSDP2's",
        },
        {
            "if you": "have layers too large for one GPU, or train at thousands of GPUs on NVIDIA",
            "pick": "Megatron-Core",
            "because (the runs)": "its objects build from this book's YAML (every name checked "
            f"against its source){seen['megatron']}, with its local layers neither fused nor "
            "compiled; its tensor parallelism is not run here (two GPUs needed)",
            "what could change it": f"{decide} with Transformer Engine's fused layers, and the "
            "planned two-GPU TP comparison",
        },
        {
            "if you": "already run Colossal-AI, or want its one hybrid plugin for TP + PP + SP "
            "+ ZeRO",
            "pick": "Colossal-AI, knowing it is frozen",
            "because (the runs)": "its plugins trained every layout of this book; Gemini needs "
            f"enable_async_reduce=False. Last release {cai['release']['value']}, pins "
            f"{cai['pins']['value']}, last library change {cai['last_library_change']['value']} "
            f"(checked {maintenance['checked']})",
            "what could change it": "a new release for current torch and transformers",
        },
    ]
