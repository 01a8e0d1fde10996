"""Activation memory of one transformer layer on one rank: Korthikanti et al. 2022, Table 2.

Used by Chapter 7 (memory) through :func:`helpers.cost.memory.estimate`, and by Chapter 11's
numeric questions. Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
Transformer Models", Table 2, give bytes per transformer layer, 16-bit, no recomputation:
no parallelism sbh(34 + 5as/h); tensor parallel sbh(10 + 24/t + 5as/(ht)); tensor + sequence
parallel (sbh/t)(34 + 5as/h); full recomputation keeps only the layer input, 2sbh (2sbh/t with
sequence parallelism). Flash attention stores no s×s scores, dropping the 5as/h term
(Korthikanti et al. 2022, the sbh(34 + 5as/h) count; Chapter 7).

An own sequence axis of size S (Ulysses all_to_all: sequence split outside attention, heads
split inside) divides everything by S; ring_attn is modelled the same way (Colossal-AI runs it
with flash attention, so the score term is absent there anyway). Left out, as in Table 2:
embedding dropout, final norm and output-layer logits (Korthikanti §4.3), and the one-layer
working set recomputed during backward.
"""

from __future__ import annotations


def check_positive(name: str, value, allow_zero: bool = False) -> None:
    """A ValueError unless ``value`` is a positive number (or zero with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(
            f"{name} must be {'non-negative' if allow_zero else 'positive'}, got {value!r}"
        )


def check_degree(name: str, value) -> None:
    """A ValueError unless ``value`` is a positive integer (a parallel degree, a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def layer_activations(
    seq_len: int,
    micro_batch: int,
    hidden: int,
    heads: int,
    tp: int = 1,
    sequence_parallel: bool = False,
    recompute: bool = False,
    flash: bool = False,
    sp: int = 1,
) -> float:
    """Activation bytes of one transformer layer on one rank (Korthikanti et al. 2022, Table 2).

    ``sequence_parallel`` is Megatron SP (split_gather/ring: the sequence split over the tensor
    group); ``sp`` is an own sequence axis (all_to_all/ring_attn) dividing everything by S.

    >>> round(layer_activations(2048, 8, 4096, 32) / 1e9, 2)
    7.65
    """
    for name, value in (
        ("seq_len", seq_len),
        ("micro_batch", micro_batch),
        ("hidden", hidden),
        ("heads", heads),
    ):
        check_positive(name, value)
    check_degree("tp", tp)
    check_degree("sp", sp)
    s, b, h, a, t = seq_len, micro_batch, hidden, heads, tp
    sbh = s * b * h
    if recompute:  # only the layer input is kept (2 bytes per element)
        per_layer = 2 * sbh / (t if sequence_parallel else 1)
    else:
        scores = (
            0.0 if flash else 5 * a * s / h
        )  # the s×s attention scores, softmax and dropout mask
        if sequence_parallel:
            per_layer = sbh / t * (34 + scores)
        else:
            per_layer = sbh * (10 + 24 / t + scores / t)
    return per_layer / sp
