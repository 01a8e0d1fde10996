"""Chapter 5, "Changing the layout on resume" (helpers/demos/ch05_dcp.py, ch05_dcp_universal.py,
helpers/train/dcp_reshard.py, ds_universal.py, helpers/chapters/ch05_dcp.py).

PyTorch DCP: a checkpoint of FSDP2 × TP on 4 gloo ranks continues under FSDP2 and under TP on 2
ranks within the tolerance of the uninterrupted run, while the control that drops AdamW's state
does not; the checkpoint written by ``async_save`` while training went on holds the same numbers;
the chunks in ``.metadata`` tile the weight. DeepSpeed: a ZeRO-1 × AutoTP checkpoint, converted
by ``ds_to_universal``, continues on one process. The table's rows are checked on
synthetic inputs."""

from __future__ import annotations

import pytest

from helpers.chapters import ch05_dcp as show
from helpers.train import dcp_reshard as dr


@pytest.fixture(scope="module")
def dcp(tmp_path_factory) -> dict:
    return show.run_dcp(tmp_path_factory.mktemp("dcp"))  # the notebook's save: shared in make test


def test_resharded_runs_continue_within_the_tolerance_and_the_control_does_not(dcp):
    gaps = show.dcp_gaps(dcp)
    assert set(gaps["layouts"]) == {"fsdp2", "tp2"}
    assert max(gaps["layouts"].values()) <= dr.TOLERANCE
    assert gaps["scratch"] <= dr.TOLERANCE  # layouts differ by reduction order only
    assert gaps["weights_only"] > 10 * dr.TOLERANCE  # without AdamW's state the run is another
    assert gaps["async_vs_sync"] == 0.0  # staged before training moved on


def test_the_saved_chunks_tile_the_weight_and_each_layout_reads_its_own(dcp):
    saved = dcp["save"][0]["saved_chunks"]
    assert sorted(c["rank"] for c in saved) == [0, 1, 2, 3]
    rows = {c["offsets"][0] for c in saved}
    cols = {c["offsets"][1] for c in saved}
    assert len(rows) == len(cols) == 2  # row-parallel down_proj: rows by D, columns by T
    area = sum(c["sizes"][0] * c["sizes"][1] for c in saved)
    fsdp = [r["layouts"]["fsdp2"]["chunk"] for r in dcp["load"]]
    tp = [r["layouts"]["tp2"]["chunk"] for r in dcp["load"]]
    assert [c["offsets"][1] for c in fsdp] == [0, 0] and fsdp[0]["sizes"][1] == 2 * saved[0][
        "sizes"
    ][1]
    assert [c["offsets"][0] for c in tp] == [0, 0] and tp[0]["sizes"][0] == 2 * saved[0]["sizes"][0]
    for blocks in (fsdp, tp):
        assert sum(c["sizes"][0] * c["sizes"][1] for c in blocks) == area


def test_async_save_returns_before_it_completes(dcp):
    t = show.async_numbers(dcp)
    assert 0 < t["async_return_s"] <= t["async_complete_s"]
    assert t["blocking_s"] > 0 and t["staged_bytes"] > 0
    for r in dcp["save"]:
        assert r["overlapped_return_s"] <= r["overlapped_complete_s"]


def test_deepspeed_universal_checkpoint_changes_the_layout(tmp_path):
    """AutoTP T = 2 on 2 ranks, converted, continued on one process (the notebook's cells run
    the 4-rank ones; this is the cheapest cell that still merges tensor-parallel slices)."""
    got = show.run_deepspeed(tmp_path, [("tp2-to-one", (1, 2, 2), (1, 1), False)])["tp2-to-one"]
    assert "error" not in got and got["gap"] <= dr.TOLERANCE
    assert got["params_converted"] == 21  # every parameter of the 2-layer Llama, merged whole


def test_table_rows_say_what_was_run_and_what_was_refused():
    dcp = {"layouts": {"fsdp2": 1e-6, "tp2": 2e-6}}
    ds = {
        "a": {"saved": (1, 2, 4), "loaded": (1, 2), "raw": False, "gap": 3e-7},
        "b": {"saved": (1, 2, 4), "loaded": (1, 2), "raw": True, "error": "AssertionError: x"},
    }
    rows = show.table_rows(dcp, ds, {"max_loss_diff_vs_source": 4e-7}, {"gap": 3.8e-4})
    results = [r["max |Δloss|"] for r in rows]
    assert results[:4] == ["1.0e-06", "2.0e-06", "3.0e-07", "AssertionError (refused)"]
    assert rows[2]["saved as"] == "ZeRO-1 D=2 × AutoTP T=2 (4 ranks)"
    assert rows[2]["loaded as"] == "ZeRO-1 D=2 (2 ranks)"
    assert "3.8e-04" in results and rows[-1]["max |Δloss|"] == "not run on the CPU"
    assert show.table_rows(dcp, {}, None, None)[-2]["max |Δloss|"] == "not recorded"
