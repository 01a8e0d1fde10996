"""Chapter 9, "Context parallelism: ring attention": the ring demo's checks and tables, the work
per rank and step that :func:`helpers.figures.ch09_sequence.work_figure` draws, the comparison
with Ulysses, and Colossal-AI 0.5.0's ``ring_attn`` read and called.

Used by ``notebooks/09_quick_demos.ipynb`` and ``tests/test_ch09_context_parallel.py``. The demo
is ``helpers/demos/ch09_ring_attention.py``; the formulas are in :mod:`helpers.parallel.cp` (the
ring) and :mod:`helpers.cost.comm` (Ulysses, Chapter 1's "Ulysses: all-to-all across heads").
"""

from __future__ import annotations

import contextlib
import warnings
from unittest import mock

from helpers.cost.comm import NOMINAL_LINKS, ops_bytes_sent, ulysses_layer_ops
from helpers.cost.mfu import H200_BF16_PEAK
from helpers.parallel.cp import (
    LAYOUTS,
    critical_path,
    overlap_tokens,
    positions,
    ring_bytes,
    step_work,
)

DEMO = "ch09_ring_attention"
ARGS = ["--seq", "32", "--heads", "4", "--head-dim", "8", "--batch", "2"]  # notebook and tests
PLUGIN_ARGS = ["--plugin"]  # Colossal-AI's HybridParallelPlugin, tp=2 x sp=2 on 4 ranks


def ring_results(results: list[dict], layout: str) -> list[dict]:
    """The ring's results of one layout, one per rank, in rank order."""
    return [r for r in results if r["method"] == "ring" and r["layout"] == layout]


def layout_rows(results: list[dict]) -> list[dict]:
    """Per layout: the tokens each rank held, the chunk pairs it computed per step (counted in the
    run) against :func:`helpers.parallel.cp.step_work`, and the critical path."""
    rows = []
    for layout in LAYOUTS:
        runs = ring_results(results, layout)
        world, seq = runs[0]["world_size"], runs[0]["shape"][1]
        measured = [r["work"] for r in runs]
        assert all(
            r["positions"] == positions(r["rank"], world, seq, layout).tolist() for r in runs
        )
        rows.append(
            {
                "layout": layout,
                "rank 0 holds tokens": _spans(runs[0]["positions"]),
                f"rank {world - 1} holds tokens": _spans(runs[-1]["positions"]),
                "chunk pairs per rank (counted)": [sum(w) for w in measured],
                "equal to the formula": measured == step_work(world, layout),
                "critical path (chunk pairs)": critical_path(measured),
            }
        )
    return rows


def _spans(pos: list[int]) -> str:
    spans, start = [], pos[0]
    for a, b in zip(pos, pos[1:] + [None]):
        if b != a + 1:
            spans.append(f"{start}-{a}")
            start = b
    return ", ".join(spans)


def work_by_layout(results: list[dict]) -> dict[str, list[list[int]]]:
    """Per layout, the chunk pairs each rank computed at each ring step (``[rank][step]``), as
    :func:`helpers.figures.ch09_sequence.work_figure` draws them."""
    return {layout: [r["work"] for r in ring_results(results, layout)] for layout in LAYOUTS}


def ulysses_bytes(b: int, s: int, h: int, ranks: int, e: int) -> float:
    """Ulysses' bytes per rank for one layer's attention in one pass, forward or backward (four
    all-to-alls each), from :func:`helpers.cost.comm.ulysses_layer_ops`."""
    return ops_bytes_sent(ulysses_layer_ops(b, s, h, ranks, e, backward=False), ranks)


def bytes_rows(results: list[dict]) -> list[dict]:
    """Bytes each rank sent in the demo, per method and phase, against the formulas."""
    rows = []
    for method in ("ring", "ulysses"):
        if method == "ring":
            runs = ring_results(results, "zigzag")
        else:
            runs = [r for r in results if r["method"] == method and r["ran"]]
        if not runs:
            continue
        b, s, a, d = runs[0]["shape"]
        world, e = runs[0]["world_size"], runs[0]["element_size"]
        for phase in ("forward", "backward"):
            sent = {r["sent"][phase] for r in runs}
            formula = (
                ring_bytes(b, s, a * d, world, e, backward=phase == "backward")
                if method == "ring"
                else ulysses_bytes(b, s, a * d, world, e)
            )
            rows.append(
                {
                    "method": method,
                    "phase": phase,
                    "bytes sent per rank (counted)": ", ".join(f"{x:,}" for x in sorted(sent)),
                    "formula": f"{formula:,.0f}",
                    "equal": sent == {formula},
                }
            )
    return rows


def scaling_rows(b=1, s=131_072, h=2048, heads=16, e=2, degrees=(2, 4, 8, 16, 32)) -> list[dict]:
    """Per-layer bytes per rank, forward and backward, of ring attention and Ulysses at a long
    sequence (the chapter's 0.54 B Llama: h = 2048, 16 heads), in MB."""
    rows = []
    for n in degrees:
        ring = ring_bytes(b, s, h, n, e) + ring_bytes(b, s, h, n, e, backward=True)
        fits = heads % n == 0
        uly = 2 * ulysses_bytes(b, s, h, n, e) if fits else None
        rows.append(
            {
                "S": n,
                "tokens per rank": f"{s // n:,}",
                "ring (MB)": f"{ring / 1e6:,.0f}",
                "Ulysses (MB)": f"{uly / 1e6:,.0f}" if fits else f"cannot run: {heads} heads",
                "ring / Ulysses": f"{ring / uly:.1f}" if fits else "",
            }
        )
    return rows


def overlap_rows(kv_shares=(1.0, 0.25)) -> list[dict]:
    """Tokens per rank above which a ring step's attention hides its K/V transfer, on an H200 at
    its dense bf16 peak, over NVLink and over one InfiniBand NIC (nominal links of
    :data:`helpers.cost.comm.NOMINAL_LINKS`)."""
    rows = []
    for key in ("nvlink4", "ib_ndr"):
        link = NOMINAL_LINKS[key]
        for kv in kv_shares:
            row = {"link": link.name.split(" (")[0], "kv heads / heads": kv}
            for label, share in (("no mask", 1.0), ("causal, zigzag", 0.5)):
                n = overlap_tokens(H200_BF16_PEAK, link.bandwidth_bytes_per_s, 2, kv, share)
                row[f"s/S at least ({label})"] = f"{n:,.0f}"
            rows.append(row)
    return rows


def plugin_rows(results: list[dict]) -> list[dict]:
    """What HybridParallelPlugin (tp=2, sp=2, 4 ranks) built in each own-axis mode: its sequence
    and tensor groups and the switches it set."""
    rows = []
    for mode in ("ring_attn", "all_to_all"):
        runs = [r for r in results if r["mode"] == mode]
        groups = lambda key: sorted({tuple(r[key]) for r in runs})  # noqa: E731
        rows.append(
            {
                "sequence_parallelism_mode": mode,
                "sp groups": [list(g) for g in groups("sp_group")],
                "tp groups": [list(g) for g in groups("tp_group")],
                "enable_flash_attention": runs[0]["enable_flash_attention"],
                "parallel_output": runs[0]["parallel_output"],
            }
        )
    return rows


def _attn():
    """Colossal-AI's ``shardformer.layer.attn``, imported without its missing-extension warnings
    (apex, tensornvme)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from colossalai.shardformer.layer import attn
    return attn


@contextlib.contextmanager
def _as_sp_rank(attn, sp_size: int, rank: int):
    """``torch.distributed`` answers as sp rank ``rank`` of ``sp_size`` would, and Colossal-AI's
    log line ("Using 2D Ring Attention ...") goes nowhere."""
    with (
        mock.patch.object(attn.dist, "get_world_size", return_value=sp_size),
        mock.patch.object(attn.dist, "get_rank", return_value=rank),
        mock.patch.object(attn, "get_dist_logger", return_value=mock.Mock()),
    ):
        yield


class _Mesh:
    """Stands in for ``ProcessGroupMesh``: records the rank lists asked for along the sp axis."""

    def get_group_along_axis(self, axis, indices_at_axis=None, backend=None):
        return tuple(indices_at_axis) if indices_at_axis is not None else "sp group"


def double_ring_groups(sp_size: int, inner_ring_size: int) -> list[dict]:
    """What Colossal-AI 0.5.0's ``RingAttention.get_double_ring_groups`` gives each sp rank: its
    own code run in this process, with the group size and rank it would read from
    ``torch.distributed`` supplied and a mesh that returns the rank lists it is asked for."""
    attn = _attn()
    rows = []
    for rank in range(sp_size):
        with _as_sp_rank(attn, sp_size, rank):
            inner, inter = attn.RingAttention.get_double_ring_groups(2, _Mesh(), inner_ring_size)
        first = rank // inner_ring_size * inner_ring_size
        rows.append(
            {
                "sp rank": rank,
                "inner ring": "none" if inner is None else list(inner),
                "inter ring": list(inter),
                "as intended": inner == tuple(range(first, first + inner_ring_size))
                and inter == tuple(range(rank % inner_ring_size, sp_size, inner_ring_size)),
            }
        )
    return rows


def asked_groups(sp_size: int, inner_ring_size: int) -> list[list[int]]:
    """Every rank list of the sp axis that ``get_double_ring_groups`` asks the mesh for (on sp
    rank 0; every rank asks for the same lists)."""
    attn = _attn()
    asked = []

    class Recording(_Mesh):
        def get_group_along_axis(self, axis, indices_at_axis=None, backend=None):
            if indices_at_axis is not None:  # None: the whole sp axis, asked for first
                asked.append(list(indices_at_axis))
            return super().get_group_along_axis(axis, indices_at_axis, backend)

    with _as_sp_rank(attn, sp_size, 0):
        attn.RingAttention.get_double_ring_groups(2, Recording(), inner_ring_size)
    return asked


def mesh_rank(sp_size: int, sp_index: int) -> str:
    """The global rank ``ProcessGroupMesh`` computes for index ``sp_index`` of an sp axis of
    ``sp_size`` (mesh (dp, pp, sp, tp) = (1, 1, sp_size, 1), as the plugin builds it for
    ``ring_attn``), or the error it raises."""
    _attn()  # Colossal-AI's import warnings, silenced once
    from colossalai.cluster import ProcessGroupMesh

    try:
        return str(ProcessGroupMesh.ravel((0, 0, sp_index, 0), (1, 1, sp_size, 1)))
    except ValueError as err:
        return f"ValueError: {err}"


def flash_attn_error() -> str:
    """Colossal-AI's ``RingAttention.attention`` called here: the error it stops with."""
    import torch

    attn = _attn()
    q = torch.zeros(1, 2, 8, 4)  # (b, a, s, d)
    try:
        attn.RingAttention.attention(
            q, q, q, sp_axis=0, attention_mask_type=attn.AttnMaskType.CAUSAL
        )
    except RuntimeError as err:
        return f"RuntimeError: {err}"
    return "no error: flash-attn is installed here"
