"""Chapter 2's "torch's own mesh": DeviceMesh and ProcessGroupMesh give the same groups on 4 gloo
ranks, FSDP2 + tensor parallel match the unsplit model (the launch is shared with the notebook),
the DTensor shapes follow from their placements, and the questions of
``helpers.chapters.ch11_mesh_trace``."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers.chapters import ch02_torch_mesh
from helpers.parallel import device_mesh as dm

PAGE = (Path(__file__).resolve().parents[1] / "book" / "02_combining.md").read_text()


def test_axes_follow_the_book_order_and_local_shapes_follow_placements():
    assert dm._axes({"tp": 2, "dp": 4}) == ("dp", "tp")
    assert dm._axes({"tp": 1, "dp": 2, "pp": 1}) == ("dp", "pp", "tp")
    with pytest.raises(ValueError, match="unknown axes"):
        dm._axes({"ep": 2})
    assert dm.local_shape([32, 8], ["_S(0, 2)", "S(0)"], [2, 2]) == [8, 8]
    assert dm.local_shape([8, 32], ["S(0)", "S(1)"], [2, 2]) == [4, 16]
    assert dm.local_shape([8], ["S(0)", "R"], [2, 2]) == [4]
    with pytest.raises(ValueError, match="evenly"):
        dm.local_shape([6], ["S(0)"], [4])


def test_block_module_equals_the_plain_tensor_block():
    import torch

    from helpers.parallel.tp import mlp_block, mlp_blocks

    full = mlp_blocks(2, 8, 0, torch.device("cpu"))
    x = torch.randn(3, 8)
    want = mlp_block(mlp_block(x, full[0]), full[1])
    torch.testing.assert_close(dm.Stack(full)(x), want)


def test_torch_and_colossal_meshes_agree_and_fsdp2_tp_matches_the_unsplit_model():
    results = ch02_torch_mesh.run().results
    facts = ch02_torch_mesh.check(results)  # raises on any disagreement
    assert facts["groups agree"] and facts["same group objects"]
    rows = ch02_torch_mesh.group_rows(results)
    assert [r["tp group torch"] for r in rows] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["dp group Colossal-AI"] for r in rows] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    for r in results:
        assert r["dtensor_placements"] == ["S(0)", "S(1)"]
        d, t = r["torch_coords"]
        block = [[4.0 * i + j for j in (2 * t, 2 * t + 1)] for i in (2 * d, 2 * d + 1)]
        assert r["dtensor_local"] == block  # rows by r_D, columns by r_T
        for p in r["placements"].values():
            assert dm.local_shape(p["global"], p["placements"], [2, 2]) == p["local"]
    names = [row["parameter"] for row in ch02_torch_mesh.placement_rows(results[0])]
    assert names == [f"blocks.0.{m}.{k}" for m in ("down", "up") for k in ("bias", "weight")]


def test_page_exercise_answers_on_torch_mesh_and_trace():
    from helpers.chapters.ch02_trace import expected_collectives
    from helpers.parallel.mesh import RankMesh

    mesh = RankMesh(dp=4, tp=2)  # init_device_mesh((4, 2)) and ProcessGroupMesh(4, 2) alike
    assert (mesh.coords(5)["dp"], mesh.coords(5)["tp"]) == (2, 1)
    assert mesh.group_of(5, "tp") == [4, 5] and mesh.group_of(5, "dp") == [1, 3, 5, 7]
    assert "rank 5 is $(r_D, r_T) = (2, 1)$: tensor group {4, 5}, data group {1, 3, 5, 7}" in (
        PAGE.replace("Rank 5", "rank 5")
    )
    assert expected_collectives(8, tp=2, dp=2) == 47 == 15 + 32
    assert expected_collectives(8, tp=2, dp=1) == 15 and expected_collectives(8, tp=1, dp=2) == 32
    assert "**Exercise 9.** 47: 15 tensor-parallel all-reduces" in PAGE
