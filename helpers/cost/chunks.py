"""Gemini's chunks for a Llama: the parameter sizes in order, the chunk-size search, the packing.

Used by Chapter 7's memory model (:func:`helpers.cost.memory_llama.model_states`: GeminiPlugin
keeps whole chunks, padding included) and its page's numbers (the chunk size and count of the
measured Llama). Both steps are Colossal-AI 0.5.0's: ``search_chunk_configuration`` in
``colossalai/zero/gemini/chunk/search_utils.py`` chooses the size, the ``ChunkManager`` packs the
parameters in ``model.parameters()`` order.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from helpers.models.shape import ModelShape

GEMINI_MIN_CHUNK = 32 * 2**20  # GeminiPlugin min_chunk_size_m=32 and search_range_m=32 (elements)
GEMINI_SEARCH_INTERVAL = 1024  # colossalai.zero.gemini.chunk.utils: hidden_dim=None -> 1024


def parameter_sizes(shape: ModelShape) -> list[int]:
    """Element counts of the Llama's parameters in ``model.parameters()`` order."""
    h, f, kv = shape.hidden, shape.ffn, shape.kv_width
    # q, k, v, o; gate, up, down; the two norms
    layer = [h * h, kv * h, kv * h, h * h, f * h, f * h, h * f, h, h]
    return [shape.vocab * h] + layer * shape.layers + [h, shape.vocab * h]


@lru_cache(maxsize=None)
def gemini_chunks(shape: ModelShape, dp: int) -> tuple[int, int]:
    """(chunk size, number of chunks) Gemini builds for the Llama: Colossal-AI 0.5.0's
    ``search_chunk_configuration`` (parameters above mean + 3σ left out of the search, chunk sizes
    from 32 Mi elements in steps of 1024 over 32 Mi, the least unused space wins) followed by the
    ``ChunkManager``'s packing in parameter order (a parameter that does not fit opens a new
    chunk)."""
    sizes = np.array(parameter_sizes(shape))
    searched = sizes[sizes <= sizes.mean() + 3 * sizes.std()]
    start = int(
        np.ceil(max(GEMINI_MIN_CHUNK, searched.max()) / GEMINI_SEARCH_INTERVAL)
        * GEMINI_SEARCH_INTERVAL
    )
    candidates = np.arange(
        start, start + GEMINI_MIN_CHUNK + 1, GEMINI_SEARCH_INTERVAL, dtype=np.int64
    )
    acc, left = np.zeros_like(candidates), np.zeros_like(candidates)
    for size in searched:  # search_utils._get_unused_byte, for every candidate at once
        new = size > left
        acc = np.where(new, acc + left, acc)
        left = np.where(new, candidates, left) - size
    chunk = int(candidates[np.argmin(left + acc)])
    chunk += -chunk % dp
    count, room = 0, 0
    for size in sizes:
        if size > room:
            count, room = count + 1, max(chunk, size + (-size % dp))
        room -= size
    return chunk, count
