"""Chapter 7's notebook glue (helpers.chapters.ch07_memory): the bytes autograd saves in a small
Llama's forward and loss, and the count that predicts them, to the byte, also for a shape the
notebook does not show (grouped-query attention, another head width)."""

import pytest
import torch

from helpers.chapters import ch07_memory as memory_show
from helpers.models.shape import ModelShape

BOOK = ModelShape.llama(layers=2, hidden=128, heads=4, kv_heads=4, vocab=512)
GQA = ModelShape.llama(layers=3, hidden=96, heads=6, kv_heads=2, vocab=300)


def _ids(shape: ModelShape, b: int, s: int) -> torch.Tensor:
    return torch.randint(0, shape.vocab, (b, s), generator=torch.Generator().manual_seed(0))


def test_the_formula_is_the_notebooks_count():
    assert memory_show.activation_formula(BOOK, 3, 40, 4, "sdpa") == 3_274_724
    assert memory_show.activation_formula(BOOK, 3, 40, 2, "eager") == 2_083_044


@pytest.mark.parametrize("dtype, e", [(torch.float32, 4), (torch.bfloat16, 2)])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_autograd_saves_what_the_formula_says(dtype, e, attn):
    b, s = 2, 24
    saved = memory_show.saved_bytes(GQA, _ids(GQA, b, s), dtype, attn)
    assert saved == memory_show.activation_formula(GQA, b, s, e, attn)


def test_eager_attention_saves_more_than_sdpa():
    ids = _ids(BOOK, 3, 40)
    eager = memory_show.saved_bytes(BOOK, ids, torch.bfloat16, "eager")
    assert eager > memory_show.saved_bytes(BOOK, ids, torch.bfloat16, "sdpa")


def test_one_step_traced_peaks_at_the_start_of_backward():
    from helpers.train.memory_phases import bf16_llama_step, step_trace, trace_facts

    shape = ModelShape.llama(layers=1, hidden=32, heads=2, kv_heads=2, vocab=256)
    b, s = 2, 16
    trace = step_trace(*bf16_llama_step(shape, b, s))
    facts = trace_facts(trace)
    at = facts["at_peak"]
    assert facts["peak_phase"] == "backward" and at["Gradient"] == 0
    assert at["Temp"] == 8 * b * s * shape.vocab  # the NLL's and the log-softmax's fp32 gradients
    assert facts["activations_after_backward"] == 0 and facts["end"] == facts["start"]
    assert facts["gradients_after_backward"] == at["Parameter"]
    assert list(trace["ends"]) == ["forward", "backward", "optimizer step", "zero_grad"]
