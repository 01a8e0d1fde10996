"""Chapter 9's context parallelism: the ring's layouts, work and bytes; the demo on 4 and 3 ranks
against full attention; Colossal-AI 0.5.0's ring_attn groups and its flash-attn requirement; the
interview questions of ``helpers.chapters.ch11_context_parallel``."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.chapters import ch09_context_parallel as cp_show
from helpers.parallel import cp
from helpers.run.launch import launch

PAGE = (Path(__file__).resolve().parents[1] / "book" / "09_quick_demos.md").read_text()


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_layouts_cover_the_sequence_once_and_zigzag_balances_the_work(world):
    for layout in cp.LAYOUTS:
        held = sorted(p for r in range(world) for p in cp.positions(r, world, 8 * world, layout))
        assert held == list(range(8 * world))
    contiguous, zigzag = cp.step_work(world, "contiguous"), cp.step_work(world, "zigzag")
    assert [sum(w) for w in contiguous] == [4 * r + 3 for r in range(world)]
    assert all(w == [3] + [2] * (world - 1) for w in zigzag)  # every rank, every step
    assert sum(map(sum, contiguous)) == sum(map(sum, zigzag)) == world * (2 * world + 1)
    assert cp.critical_path(contiguous) == 4 * world - 1
    assert cp.critical_path(zigzag) == 2 * world + 1


def test_byte_and_overlap_formulas():
    block = 1 * (4096 // 4) * 512 * 2
    assert cp.ring_bytes(1, 4096, 512, 4) == 2 * block * 3
    assert cp.ring_bytes(1, 4096, 512, 4, backward=True) == 2 * block * 3 + 2 * block * 4
    assert cp.overlap_tokens(1e15, 1e11) == 1e4  # n >= F/B with e = 2, no mask, MHA
    assert cp.overlap_tokens(1e15, 1e11, computed_share=0.5, kv_share=0.25) == 5e3
    with pytest.raises(ValueError, match="not divisible"):
        cp.positions(0, 4, 30, "zigzag")


def test_ring_attention_on_four_ranks_equals_full_attention():
    results = launch(cp_show.DEMO, 4, cp_show.ARGS, show="none").results
    ring = [r for r in results if r["method"] == "ring"]
    assert len(ring) == 8 and all(r["max_diff"] < 1e-5 for r in ring)
    rows = cp_show.layout_rows(results)
    assert [r["equal to the formula"] for r in rows] == [True, True]
    assert [r["critical path (chunk pairs)"] for r in rows] == [15, 9]
    assert rows[1]["rank 0 holds tokens"] == "0-3, 28-31"
    table = cp_show.bytes_rows(results)
    assert len(table) == 4 and all(r["equal"] for r in table)
    ulysses = [r for r in results if r["method"] == "ulysses"]
    assert all(r["ran"] and r["max_diff"] < 1e-5 for r in ulysses)


def test_ring_runs_where_ulysses_cannot():
    args = ["--seq", "16", "--heads", "3", "--head-dim", "8", "--batch", "2"]
    results = launch(cp_show.DEMO, 2, args, show="none").results
    assert len(results) == 6 and all(r["max_diff"] < 1e-5 for r in results if "max_diff" in r)
    assert {r["reason"] for r in results if r["method"] == "ulysses"} == {
        "3 heads are not divisible by S=2"
    }
    assert all(r["equal"] for r in cp_show.bytes_rows(results))


def test_scaling_and_overlap_tables():
    rows = cp_show.scaling_rows()
    assert [r["ring / Ulysses"] for r in rows] == ["2.0", "3.3", "6.3", "12.3", ""]
    assert rows[-1]["Ulysses (MB)"] == "cannot run: 16 heads"
    overlap = cp_show.overlap_rows()
    assert overlap[0]["s/S at least (causal, zigzag)"] == "4,398"
    assert overlap[2]["s/S at least (causal, zigzag)"] == "39,580"


def test_colossalai_double_ring_groups_as_shipped():
    assert all(r["as intended"] for r in cp_show.double_ring_groups(16, 4))
    assert all(r["as intended"] for r in cp_show.double_ring_groups(4, 2))
    rows = cp_show.double_ring_groups(8, 2)
    assert [r["inner ring"] for r in rows[4:]] == ["none"] * 4
    assert not any(r["as intended"] for r in rows)
    asked = cp_show.asked_groups(8, 4)
    assert [8, 9, 10, 11] in asked and [12, 13, 14, 15] in asked
    assert cp_show.mesh_rank(8, 7) == "7" and cp_show.mesh_rank(8, 8).startswith("ValueError")
    assert "Flash Attention is not installed" in cp_show.flash_attn_error()


def test_colossalai_plugin_builds_ring_attn_groups_on_gloo():
    results = launch(cp_show.DEMO, 4, cp_show.PLUGIN_ARGS, show="none", timeout_s=300).results
    ring, ulysses = cp_show.plugin_rows(results)
    assert ring["sp groups"] == [[0, 2], [1, 3]] and ring["tp groups"] == [[0, 1], [2, 3]]
    assert ulysses["sp groups"] == [[0, 1], [2, 3]] and ulysses["tp groups"] == [[0, 2], [1, 3]]
    assert ring["enable_flash_attention"] and not ulysses["enable_flash_attention"]
    assert ring["parallel_output"]


KEYS = ["ch09-fig-ring-work", "ch09-ring-layouts", "ch09-ring-bytes", "ch09-ring-scaling"]
KEYS += ["ch09-ring-overlap", "ch09-ring-plugin", "ch09-ring-double"]


def test_page_glues_the_notebook_and_quotes_computed_numbers():
    nb = (Path(__file__).resolve().parents[1] / "notebooks" / "09_quick_demos.ipynb").read_text()
    for key in KEYS:
        assert f"```{{glue}} {key}\n:doc: ../notebooks/09_quick_demos.ipynb" in PAGE, key
        assert f'\\"{key}\\"' in nb or f"'{key}'" in nb, key
    contiguous, zigzag = (
        (cp.critical_path(cp.step_work(n, "contiguous")) for n in (4, 8)),
        (cp.critical_path(cp.step_work(n, "zigzag")) for n in (4, 8)),
    )
    (c4, c8), (z4, z8) = contiguous, zigzag
    assert (c4, z4, c8, z8) == (15, 9, 31, 17) and f"{c8 / z8:.2f}" == "1.82"
    assert "ch09-ring-ratio-8:.2f" in PAGE and "ch09-ring-contiguous-4:d" in PAGE


def test_exercise_nine():
    contiguous = [sum(w) for w in cp.step_work(4, "contiguous")]
    zigzag = [sum(w) for w in cp.step_work(4, "zigzag")]
    assert contiguous == [3, 7, 11, 15] and zigzag == [9] * 4 and sum(contiguous) == 36
    assert "3, 7, 11 and 15" in PAGE and "work of 36" in PAGE


def test_page_claims_about_the_overlap_thresholds():
    rows = cp_show.overlap_rows()
    nvlink = [float(r[k].replace(",", "")) for r in rows[:2] for k in r if k.startswith("s/S")]
    ib = [float(r[k].replace(",", "")) for r in rows[2:] for k in r if k.startswith("s/S")]
    assert max(nvlink) < 10_000  # "inside a node a few thousand tokens per GPU suffice"
    assert 10_000 < max(ib) < 100_000  # "across nodes ... the ring needs tens of thousands"
    assert "Inside a node a few thousand tokens per GPU suffice" in PAGE
