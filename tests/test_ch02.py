"""Chapter 2: Colossal-AI's real process groups equal RankMesh's, the figures draw, the page's numbers hold.

Two launches: 8 gloo ranks building ProcessGroupMesh(2, 2, 2, 1) (the chapter's D = P = T = 2), and
4 ranks constructing HybridParallelPlugin with Ulysses (all_to_all) sequence parallelism, whose own
sp axis is the fastest one.
"""

import itertools
import re
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
from helpers import plots  # noqa: E402
from helpers.launch import launch  # noqa: E402
from helpers.layouts import QWEN2_7B, Layout, data_degree, factor_parallelism, feasible_layouts  # noqa: E402
from helpers.mesh import AXES, RankMesh  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "book" / "02_combining.md").read_text()


@pytest.fixture(scope="module")
def mesh_run():
    return launch("ch02_mesh", nproc=8, args=["--tp", "2", "--pp", "2"], timeout_s=240, show="none")


@pytest.fixture(scope="module")
def plugin_run():
    args = ["--tp", "2", "--pp", "1", "--sp", "2", "--sp_mode", "all_to_all", "--plugin"]
    return launch("ch02_mesh", nproc=4, args=args, timeout_s=240, show="none")


def test_every_group_of_the_8_rank_mesh_matches_rankmesh(mesh_run):
    mesh = RankMesh(dp=2, pp=2, tp=2)
    assert [r["rank"] for r in mesh_run.results] == list(range(8))
    for r in mesh_run.results:
        assert r["layout"] == "D=2 × T=2 × P=2"
        assert r["coords"] == mesh.coords(r["rank"])
        for axis in AXES:
            assert r["groups"][axis] == mesh.group_of(r["rank"], axis), (r["rank"], axis)
            assert r["sums"][axis] == sum(mesh.group_of(r["rank"], axis))  # the group really communicates
    groups = {axis: sorted({tuple(r["groups"][axis]) for r in mesh_run.results}) for axis in ("tp", "pp", "dp")}
    assert groups == {"tp": [(0, 1), (2, 3), (4, 5), (6, 7)], "pp": [(0, 2), (1, 3), (4, 6), (5, 7)],
                      "dp": [(0, 4), (1, 5), (2, 6), (3, 7)]}


def test_hybrid_parallel_plugin_builds_the_same_groups_with_ulysses(plugin_run):
    mesh = Layout.for_world(4, tp=2, sp=2, sp_mode="all_to_all").mesh()
    assert mesh == RankMesh(dp=1, pp=1, tp=2, sp=2)
    for r in plugin_run.results:
        rank, plugin = r["rank"], r["plugin"]
        for axis in AXES:
            assert r["groups"][axis] == plugin[axis] == mesh.group_of(rank, axis), (rank, axis)
        # gradients and ZeRO run over dp × sp; the plugin then reports D·S as its dp_size
        assert r["groups"]["dp_sp"] == plugin["mixed_dp"] == sorted(
            {x for d in mesh.group_of(rank, "dp") for x in mesh.group_of(d, "sp")})
        assert plugin["dp_size"] == 2
    assert plugin_run.first(0)["groups"]["tp"] == [0, 2]  # sp is the fastest axis: TP partners are not neighbours


def test_mesh_figures_draw_and_refuse_an_sp_axis():
    for fig in (plots.mesh_figure(RankMesh(2, 2, 2)),
                plots.mesh_figure(RankMesh(dp=2, pp=4, tp=4), names={"dp": "crew", "pp": "section", "tp": "trade"})):
        assert len(fig.axes) == 2
        matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="sp=2"):
        plots.mesh_figure(RankMesh(1, 1, 2, 2))


def test_builder_analogy():
    builder = RankMesh(dp=2, pp=4, tp=4)  # 2 crews × 4 sections × 4 trades
    assert builder.world_size == 32
    assert builder.coords(21) == {"dp": 1, "pp": 1, "tp": 1, "sp": 0}
    assert builder.group_of(21, "tp") == [20, 21, 22, 23]
    assert builder.group_of(21, "pp") == [17, 21, 25, 29]
    assert builder.group_of(21, "dp") == [5, 21]
    assert [len(builder.groups(a)) for a in ("tp", "pp", "dp")] == [8, 8, 16]
    talk = set(itertools.chain(*(builder.group_of(21, a) for a in ("tp", "pp", "dp")))) - {21}
    assert len(talk) == 3 + 3 + 1
