"""Chapter 2: Colossal-AI's real process groups equal RankMesh's, the figures draw, the page's
numbers hold.

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
from helpers.chapters.ch02_builder import builder_numbers, partner_line  # noqa: E402
from helpers.figures.ch02_mesh import mesh_figure  # noqa: E402
from helpers.run.launch import launch  # noqa: E402
from helpers.parallel.layouts import (
    QWEN2_7B,
    Layout,
    data_degree,
    factor_parallelism,  # noqa: E402
    feasible_layouts,
    violations,
)
from helpers.parallel.mesh import RankMesh  # noqa: E402
from helpers.parallel.vocab import AXES  # noqa: E402
from helpers.models.shape import ModelShape  # noqa: E402
from helpers.figures.rank_grid import groups, moe_groups, rank_grid_figure, strides  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "book" / "02_combining.md").read_text()
NOTEBOOK = (ROOT / "notebooks" / "02_combining.ipynb").read_text()


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
            assert r["sums"][axis] == sum(
                mesh.group_of(r["rank"], axis)
            )  # the group really communicates
    groups = {
        axis: sorted({tuple(r["groups"][axis]) for r in mesh_run.results})
        for axis in ("tp", "pp", "dp")
    }
    assert groups == {
        "tp": [(0, 1), (2, 3), (4, 5), (6, 7)],
        "pp": [(0, 2), (1, 3), (4, 6), (5, 7)],
        "dp": [(0, 4), (1, 5), (2, 6), (3, 7)],
    }


def test_hybrid_parallel_plugin_builds_the_same_groups_with_ulysses(plugin_run):
    mesh = Layout.for_world(4, tp=2, sp=2, sp_mode="all_to_all").mesh()
    assert mesh == RankMesh(dp=1, pp=1, tp=2, sp=2)
    for r in plugin_run.results:
        rank, plugin = r["rank"], r["plugin"]
        for axis in AXES:
            assert r["groups"][axis] == plugin[axis] == mesh.group_of(rank, axis), (rank, axis)
        # gradients and ZeRO run over dp × sp; the plugin then reports D·S as its dp_size
        assert (
            r["groups"]["dp_sp"]
            == plugin["mixed_dp"]
            == sorted({x for d in mesh.group_of(rank, "dp") for x in mesh.group_of(d, "sp")})
        )
        assert plugin["dp_size"] == 2
    assert plugin_run.first(0)["groups"]["tp"] == [
        0,
        2,
    ]  # sp is the fastest axis: TP partners are not neighbours


def test_mesh_figures_draw_and_refuse_an_sp_axis():
    for fig in (
        mesh_figure(RankMesh(2, 2, 2)),
        mesh_figure(
            RankMesh(dp=2, pp=4, tp=4), names={"dp": "crew", "pp": "section", "tp": "trade"}
        ),
    ):
        assert len(fig.axes) == 2
        matplotlib.pyplot.close(fig)
    with pytest.raises(ValueError, match="sp=2"):
        mesh_figure(RankMesh(1, 1, 2, 2))


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
    assert partner_line(builder, "tp", [20, 22, 23]) == (
        "  works beside        20 (paint), 22 (light), 23 (plumb)"
    )
    assert partner_line(builder, "dp", [5]) == "  compares notes with 5 (crew 0)"
    assert builder_numbers(builder, len(talk)) == {
        "ch02-builder-tp-groups": 8,
        "ch02-builder-pp-groups": 8,
        "ch02-builder-dp-groups": 16,
        "ch02-builder-partners": 7,
    }


# --- every number the page quotes, recomputed ----------------------------------------------------


def _page_has(*snippets):
    flat = re.sub(r"\s+", " ", PAGE)
    for s in snippets:
        assert re.sub(r"\s+", " ", s) in flat, f"the page no longer says {s!r}"


def seed_recommend_order(total):
    """The seed's recommend(): sort by comm cost (tp-1)*1.0 + (pp-1)*0.5 (memory column omitted)."""
    return [
        c[1:]
        for c in sorted(
            ((tp - 1) * 1.0 + (pp - 1) * 0.5, dp, tp, pp)
            for dp, tp, pp in factor_parallelism(total)
        )
    ]


def test_page_equation_examples():
    assert data_degree(64, tp=4, pp=2) == 8 and 4 * 4 * 2 == 32
    _page_has("$4 \\times 4 \\times 2 = 32$", "$D = 64 / (4 \\times 2) = 8$")
    with pytest.raises(ValueError) as err:
        data_degree(64, tp=3, pp=2)
    _page_has("```text\n" + str(err.value) + "\n```")
    assert (
        data_degree(16, 2, 2, 2, "split_gather") == 4
        and data_degree(16, 2, 2, 2, "all_to_all") == 2
    )
    _page_has("`split_gather` leaves $D = 16 / 4 = 4$", "`sp_size=2` leaves $D = 16 / 8 = 2$")
    layout = Layout.for_world(64, tp=4, pp=2, microbatch=4, zero_stage=1)
    assert layout.dp == 8 and layout.plugin_kwargs()["microbatch_size"] == 4
    _page_has("print(plugin.dp_size) # 8")


def _glues(*keys):
    for key in keys:
        assert f"02_combining.ipynb::{key}:" in PAGE, f"the page no longer glues {key}"
        assert key in NOTEBOOK, f"the notebook no longer glues {key}"


def test_page_worked_example():
    seed = factor_parallelism(32)
    assert (len(seed), seed[0], seed[-1]) == (12, (32, 1, 1), (1, 8, 4))
    _page_has("layouts, from $(D, T, P) = (32, 1, 1)$ to $(1, 8, 4)$")
    assert (QWEN2_7B.layers, QWEN2_7B.heads, QWEN2_7B.kv_heads) == (28, 28, 4)
    _page_has("$L = 28$ layers, $a = 28$ query heads and 4 key–value heads", "$B = 64$", "$b = 4$")
    search = feasible_layouts(32, QWEN2_7B, global_batch=64, microbatch=4)
    ok = [(x.dp, x.tp, x.pp) for x in search.feasible]
    assert ok == [(16, 2, 1), (8, 2, 2), (4, 2, 4), (8, 4, 1), (4, 4, 2), (2, 4, 4)]
    _glues("ch02-seed-layouts", "ch02-feasible", "ch02-ulysses-extra", "ch02-split-gather-extra")
    assert "```{glue} ch02-tab-verdicts\n:doc: ../notebooks/02_combining.ipynb" in PAGE
    assert 32 * 4 == 128 and 64 // (16 * 4) == 1 and 64 // (8 * 4) == 2 and 28 / 8 == 3.5
    _page_has(
        "$D \\cdot b = 128$ sequences per step, more than $B = 64$",
        "$m = 64 / (16 \\cdot 4) = 1$ micro-batch for $P = 2$ stages",
        "$(8, 1, 4)$ leaves $m = 2$ for $P = 4$",
        "3.5 heads",
    )
    assert seed_recommend_order(32)[0] == (32, 1, 1)
    _page_has("puts $(32, 1, 1)$ first")
    more = feasible_layouts(32, QWEN2_7B, 64, 4, sp_modes=("all_to_all", "split_gather"))
    count = {m: sum(x.sp_mode == m for x in more.feasible) for m in ("all_to_all", "split_gather")}
    assert count == {"all_to_all": 9, "split_gather": 6}
    assert sorted(
        (x.dp, x.tp, x.pp) for x in more.feasible if x.sp_mode == "split_gather"
    ) == sorted(ok)


def test_page_grid():
    mesh = RankMesh(dp=2, pp=2, tp=2)
    for axis, stride in (("tp", 1), ("pp", 2), ("dp", 4)):
        groups = mesh.groups(axis)
        assert all(g[1] - g[0] == stride for g in groups)
        text = ", ".join("{" + ",".join(map(str, g)) + "}" for g in groups)
        _page_has(f"| `{axis}` | {text} | {stride} |")
    assert mesh.coords(5) == {"dp": 1, "pp": 0, "tp": 1, "sp": 0}
    assert (mesh.group_of(5, "tp"), mesh.group_of(5, "pp"), mesh.group_of(5, "dp")) == (
        [4, 5],
        [5, 7],
        [1, 5],
    )
    _page_has(
        "Rank 5, for instance, has coordinate $(r_D, r_P, r_T) = (1, 0, 1)$",
        "rank 4",
        "rank 7",
        "rank 1",
    )
    ulysses = Layout.for_world(8, tp=2, sp=2, sp_mode="all_to_all").mesh()
    assert ulysses.groups("sp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert ulysses.groups("tp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    _page_has(
        "the sequence groups are {0,1}, {2,3}, {4,5}, {6,7} and the tensor groups "
        "{0,2}, {1,3}, {4,6}, {5,7}"
    )


def test_page_builder():
    b = RankMesh(dp=2, pp=4, tp=4)
    assert [len(b.groups(a)) for a in ("tp", "pp", "dp")] == [8, 8, 16]
    _glues("ch02-builder-tp-groups", "ch02-builder-pp-groups", "ch02-builder-dp-groups")
    assert b.coords(21) == {"dp": 1, "pp": 1, "tp": 1, "sp": 0}
    assert b.group_of(21, "tp") == [20, 21, 22, 23] and b.group_of(21, "pp") == [17, 21, 25, 29]
    assert b.group_of(21, "dp") == [5, 21]
    _page_has(
        "Worker 21 has coordinate $(r_D, r_P, r_T) = (1, 1, 1)$",
        "workers 20, 22 and 23",
        "17, 21, 25, 29",
        "worker 5",
        "partners out of 31, and only 3 of them all day",
    )
    _glues("ch02-builder-partners", "ch02-trace-collectives", "ch02-trace-tp", "ch02-trace-dp")


def test_rank_grid_strides_and_the_moe_mesh():
    D = P = T = S = E = 2
    grid = groups(dp=D, pp=P, tp=T, sp=S, ep=E)
    assert strides(grid) == {"sp": 1, "tp": S, "pp": T * S, "dp": P * T * S, "ep": T * S}
    assert grid["tp"] == RankMesh(dp=D, pp=P, tp=T, sp=S).groups("tp")
    wide = groups(dp=4, pp=1, tp=2, sp=2, ep=2)  # E splits D: each expert group inside a data one
    assert all(any(set(e) <= set(d) for d in wide["dp"]) for e in wide["ep"])
    assert moe_groups(4, 1, 2, 2, 2)["moe_dp"][0] == [0, 8]
    with pytest.raises(ValueError, match="must divide the data degree"):
        moe_groups(dp=2, pp=1, tp=1, sp=1, ep=4)
    fig = rank_grid_figure(dp=D, pp=P, tp=T, sp=S, ep=E)
    assert len(fig.axes) == 5
    matplotlib.pyplot.close(fig)
    assert "```{glue} ch02-fig-rank-grid\n:doc: ../notebooks/02_combining.ipynb" in PAGE


def test_page_exercise_answers():
    assert len(factor_parallelism(48)) == 21
    assert [(t, p) for _, t, p in factor_parallelism(48) if t == 8] == [(8, 1), (8, 2), (8, 3)]
    _page_has("**Exercise 1.** 21 pairs")
    search = feasible_layouts(32, QWEN2_7B, global_batch=128, microbatch=4)
    assert len(search.feasible) == 9 and all(x.tp == 8 for x, _ in search.rejected)
    _page_has("**Exercise 2.** 9")
    assert (
        data_degree(64, 4, 2, 1, "split_gather") == 8
        and data_degree(64, 4, 2, 2, "all_to_all") == 4
    )
    _page_has("`split_gather`: $D = 64 / (4 \\cdot 2) = 8$", "$D = 64 / (4 \\cdot 2 \\cdot 2) = 4$")
    b = RankMesh(dp=2, pp=4, tp=4)
    assert b.coords(27) == {"dp": 1, "pp": 2, "tp": 3, "sp": 0}
    assert (b.group_of(27, "tp"), b.group_of(27, "pp"), b.group_of(27, "dp")) == (
        [24, 25, 26, 27],
        [19, 23, 27, 31],
        [11, 27],
    )
    _page_has(
        "$(r_D, r_P, r_T) = (1, 2, 3)$; tensor group {24, 25, 26, 27}, "
        "pipeline group {19, 23, 27, 31}, data group {11, 27}"
    )
    llama3 = ModelShape(layers=32, heads=32, kv_heads=8)
    tps = [t for t in range(1, 33) if not violations(Layout(1, t), llama3)]
    assert max(tps) == 8
    products = sorted(
        {
            t * s
            for t in range(1, 9)
            for s in range(1, 9)
            if not violations(Layout(1, t, 1, s, "all_to_all" if s > 1 else None), llama3)
        }
    )
    assert products == [1, 2, 4, 8]
    _page_has("$T \\cdot S \\in \\{1, 2, 4, 8\\}$")
