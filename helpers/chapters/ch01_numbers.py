"""Chapter 1's running example, computed: the bytes each axis sends and the activations it keeps.

The page works one example through every axis: a Transformer layer with micro-batch b = 8,
sequence s = 2048, hidden size h = 4096 and a = 32 heads, 16-bit activations, split with
T = S = 4; and a model of Ψ = 7·10⁹ parameters trained with D = 8 replicas. :func:`running_example`
evaluates the page's formulas on it, with the ring volumes of :func:`helpers.cost.comm.bytes_sent`
and the activations of :func:`helpers.cost.activations.layer_activations` (Korthikanti et al.
2022, Table 2); notebook 01 shows them (:func:`rows`) and glues them for the page.
"""

from __future__ import annotations

from helpers.cost.activations import layer_activations
from helpers.cost.comm import bytes_sent
from helpers.parallel.pp import bubble_fraction

b, s, h, a = 8, 2048, 4096, 32  # micro-batch, sequence, hidden size, heads
T = S = 4  # tensor and sequence degrees
PSI, D, D_LARGE = 7e9, 8, 64  # parameters; data-parallel degrees
E16 = 2  # bytes per 16-bit element
MB, GB = 1e6, 1e9


def running_example() -> dict[str, float]:
    """Every number of the running example, under the key the page glues it by."""
    grads = E16 * PSI  # 2Ψ bytes of 16-bit gradients
    act = E16 * b * s * h  # one (b, s, h) activation in 16 bits
    numbers = {
        "ch01-dp-grad-gb": grads / GB,
        "ch01-dp-gb": bytes_sent("all_reduce", grads, D) / GB,
        "ch01-dp-gb-64": bytes_sent("all_reduce", grads, D_LARGE) / GB,
        "ch01-act-mb": act / MB,
        "ch01-tp-allreduce-mb": bytes_sent("all_reduce", act, T) / MB,
        "ch01-tp-layer-mb": 4 * bytes_sent("all_reduce", act, T) / MB,
        "ch01-pp-boundary-mb": act / MB,
        # Ulysses: four all-to-alls of a per-rank buffer of bsh/S elements
        "ch01-ulysses-mb": 4 * bytes_sent("all_to_all", act / S, S) / MB,
        # Megatron-style SP: two all-gathers and two reduce-scatters of the full bsh tensor
        "ch01-megatron-sp-mb": 4 * bytes_sent("all_gather", act, T) / MB,
        "ch01-act-none-gb": layer_activations(s, b, h, a) / GB,
        "ch01-act-tp-gb": layer_activations(s, b, h, a, tp=T) / GB,
        "ch01-act-tp-sp-gb": layer_activations(s, b, h, a, tp=T, sequence_parallel=True) / GB,
        "ch01-act-flash-gb": layer_activations(s, b, h, a, tp=T, sequence_parallel=True, flash=True)
        / GB,
        "ch01-bubble-m8-pct": 100 * bubble_fraction(4, 8),
        "ch01-bubble-m32-pct": 100 * bubble_fraction(4, 32),
    }
    return numbers


FORMULAS = {
    "ch01-dp-grad-gb": ("16-bit gradients of Ψ = 7e9", "2Ψ", "GB"),
    "ch01-dp-gb": ("data parallel, D = 8: all-reduce per step", "2(D-1)/D · 2Ψ", "GB"),
    "ch01-dp-gb-64": ("the same with D = 64", "2(D-1)/D · 2Ψ", "GB"),
    "ch01-act-mb": ("one activation tensor", "2bsh", "MB"),
    "ch01-tp-allreduce-mb": ("tensor parallel: one all-reduce", "2(T-1)/T · 2bsh", "MB"),
    "ch01-tp-layer-mb": ("tensor parallel: a layer, 4 all-reduces", "4 · 2(T-1)/T · 2bsh", "MB"),
    "ch01-pp-boundary-mb": ("pipeline: one boundary, each way", "2bsh", "MB"),
    "ch01-ulysses-mb": ("Ulysses: a layer, forward", "4(S-1)/S · 2bsh/S", "MB"),
    "ch01-megatron-sp-mb": ("Megatron SP: a layer, forward", "4(T-1)/T · 2bsh", "MB"),
    "ch01-act-none-gb": ("activations of a layer, unsplit", "sbh(34 + 5as/h)", "GB"),
    "ch01-act-tp-gb": ("... with tensor parallelism", "sbh(10 + 24/T + 5as/(hT))", "GB"),
    "ch01-act-tp-sp-gb": ("... and sequence parallelism", "sbh/T · (34 + 5as/h)", "GB"),
    "ch01-act-flash-gb": ("... and flash attention", "sbh/T · 34", "GB"),
    "ch01-bubble-m8-pct": ("GPipe bubble, P = 4, m = 8", "(P-1)/(m+P-1)", "%"),
    "ch01-bubble-m32-pct": ("GPipe bubble, P = 4, m = 32", "(P-1)/(m+P-1)", "%"),
}


def rows(numbers: dict[str, float]) -> list[dict]:
    """The table the notebook shows: what, formula, value (three significant digits)."""
    return [
        {"quantity": what, "formula": formula, "value": f"{numbers[key]:.3g} {unit}"}
        for key, (what, formula, unit) in FORMULAS.items()
    ]
