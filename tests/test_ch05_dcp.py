"""Chapter 5, "Changing the layout on resume": what the notebook cannot check.

The notebook runs the section's multi-rank runs once (PyTorch DCP on 4, 2 and 1 gloo ranks,
DeepSpeed's universal checkpoint, Colossal-AI's ``--reshard``) and asserts their results; these
tests cover the pure parts of helpers/chapters/ch05_dcp.py and helpers/train/ds_universal.py on
inputs the runs never produce: the block arithmetic of a DCP load against torch's own planner
(the shapes of the chapter's exercise), the statistics of the timings, the table's rows and the
error paths."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.chapters import ch05_dcp as show
from helpers.train import dcp_reshard as dr


@pytest.mark.parametrize(
    "saved, loaded, per_rank, reads",
    [
        ([4, 2], [1, 8], 4, 32),  # exercise: FSDP D=4 × TP T=2 -> TP T=8
        ([4, 2], [8, 1], 2, 16),  # -> FSDP over 8
        ([4, 2], [4, 2], 1, 8),  # the same layout reads each saved block whole
        ([4, 2], [1, 1], 8, 8),  # one process reads every block
        ([4, 2], [3, 1], None, None),  # 4096 rows do not split into 3
    ],
)
def test_read_pieces_are_the_reads_torchs_planner_makes(saved, loaded, per_rank, reads):
    shape = [4096, 11008]
    if per_rank is None:
        with pytest.raises(ValueError, match="does not split evenly into 3 × 1"):
            show.reshard_reads(shape, saved, loaded)
        return
    got = show.reshard_reads(shape, saved, loaded)
    assert (got["per_rank"], got["reads"]) == (per_rank, reads)
    assert got["elements_per_rank"] == 4096 * 11008 // (loaded[0] * loaded[1])  # its own bytes
    old, new = show.grid_blocks(shape, saved), show.grid_blocks(shape, loaded)
    pieces = show.read_pieces(old, new)
    assert show.planner_pieces(old, new) == [len(p) for p in pieces]
    for block, got_pieces in zip(new, pieces):
        assert show.area(got_pieces) == show.area([block])  # the saved blocks tile the tensor


def test_overlap_of_blocks_that_touch_or_miss_is_none():
    a = {"offsets": [0, 0], "sizes": [32, 96]}
    assert show.overlap(a, {"offsets": [0, 96], "sizes": [32, 96]}) is None  # shares an edge
    assert show.overlap(a, {"offsets": [16, 48], "sizes": [64, 96]}) == {
        "offsets": [16, 48],
        "sizes": [16, 48],
    }
    assert show.block_text(a) == "rows 0:32, columns 0:96"
    with pytest.raises(ValueError):
        show.grid_blocks([64, 192], [0, 2])


def _run(blocking, back, done, losses, extra=None):
    """A run dict shaped like the demo's results: two save ranks, two load ranks."""
    save = [
        {"blocking_s": b, "async_return_s": r, "async_complete_s": d, "state_bytes": 1000}
        | {"overlapped_complete_s": 0.2, "losses": losses, "chunk": None}
        for b, r, d in zip(blocking, back, done)
    ]
    loaded = {"layouts": {"fsdp2": {"losses": losses[4:]}}, "async_vs_sync": 0.0}
    loaded |= {"weights_only": [x + 0.01 for x in losses[4:]], "from_scratch": losses}
    return {"save": save, "load": [loaded, loaded], **(extra or {})}


def test_async_numbers_take_the_slowest_rank_and_the_best_repeat():
    losses = [4.6] * 8
    run = _run(
        [[0.3, 0.09, 0.08], [0.3, 0.1, 0.4]], [[0.05, 0.03, 0.02]] * 2, [[0.1] * 3] * 2, losses
    )
    t = show.async_numbers(run)
    assert t["blocking_s"] == 0.1  # repeat 2: slowest rank 0.1; repeat 1 carries the set-up
    assert (t["async_return_s"], t["staged_bytes"]) == (0.02, 2000)
    gaps = show.dcp_gaps(run)
    assert gaps["layouts"] == {"fsdp2": 0.0} and gaps["weights_only"] == pytest.approx(0.01)
    run["load"][0]["layouts"]["fsdp2"]["losses"] = losses[5:]
    with pytest.raises(ValueError, match="3 losses against 4"):
        show.dcp_gaps(run)


def test_table_rows_say_what_was_run_and_what_failed():
    dcp = {"layouts": {"fsdp2": 1e-6, "tp2": 2e-6}}
    ds = {
        "a": {"saved": (1, 2, 4), "loaded": (1, 2), "raw": False, "gap": 3e-7},
        "b": {"saved": (1, 2, 4), "loaded": (1, 2), "raw": True, "error": "AssertionError: x"},
    }
    rows = show.table_rows(
        dcp, ds, {"max_loss_diff_vs_source": 4e-7}, {"max_loss_diff_vs_source": 3.8e-4}
    )
    results = [r["max |Δloss|"] for r in rows]
    assert results[:4] == ["1.0e-06", "2.0e-06", "3.0e-07", "load fails (AssertionError)"]
    assert rows[2]["saved as"] == "ZeRO-1 D=2 × AutoTP T=2 (4 ranks)"
    assert rows[2]["loaded as"] == "ZeRO-1 D=2 (2 ranks)"
    assert "3.8e-04" in results and rows[-1]["max |Δloss|"] == "not run on the CPU"
    assert show.table_rows(dcp, {}, None, None)[-2]["max |Δloss|"] == "not recorded"


def test_deepspeed_config_counts_every_rank_and_the_converter_runs_one_worker(tmp_path):
    from helpers.train import ds_universal as du

    cfg = du.config(world=4, tp=2, zero=1, universal=True)
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * 4 == 2 * dr.BATCH
    assert cfg["tensor_parallel"] == {"autotp_size": 2} and cfg["checkpoint"]["load_universal"]
    assert "tensor_parallel" not in du.config(world=2, tp=1, zero=3, universal=False)
    cmd = du.convert_command(tmp_path / "saved", tmp_path / "universal")
    assert cmd[1:3] == ["-m", "deepspeed.checkpoint.ds_to_universal"]
    assert "--inject_missing_state" in cmd and cmd[cmd.index("--num_merge_workers") + 1] == "1"


def test_the_demo_refuses_a_save_step_outside_the_run():
    argv = ["-m", "helpers.demos.ch05_dcp", "--phase", "save", "--steps", "8", "--save_at", "8"]
    out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "--save_at must be between 1 and --steps - 1, not 8" in out.stderr


def test_a_layout_needs_its_own_number_of_ranks(monkeypatch):
    monkeypatch.setattr(dr.dist, "get_world_size", lambda: 2)  # no process group is started
    with pytest.raises(ValueError, match="dp2xtp2 needs 4 ranks, not 2"):
        dr.mesh_of("dp2xtp2")
