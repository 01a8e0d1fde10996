"""Chapter 1's pipeline schedules: the action lists, their bubbles, the hand-written backward, the
timed run on four ranks, Colossal-AI's pipelines on CPU ranks, and the chapter's questions."""

from collections import Counter
from pathlib import Path

import pytest
import torch

from helpers.chapters import ch01_pp_schedules as show
from helpers.figures.ch01_pp_schedules import schedules_figure, wall_figure
from helpers.models.mlp import run_blocks, tanh_blocks
from helpers.parallel import pp_schedules as pps
from helpers.parallel.pp import bubble_fraction
from helpers.parallel.pp_runtime import Chunk
from helpers.run.env import gpu_count

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "book" / "01_dimensions.md").read_text()
SHAPES = [(2, 2), (2, 4), (3, 6), (4, 4), (4, 8), (4, 12), (8, 16)]


@pytest.mark.parametrize("p,m", SHAPES)
@pytest.mark.parametrize("name", pps.SCHEDULES + pps.V_SHAPED)
def test_every_schedule_does_each_piece_of_work_once(name, p, m):
    schedule = pps.build(name, p, m)
    c = pps.chunks_of(schedule)
    split = name in ("zb-h1",) + pps.V_SHAPED
    kinds = ("F", "B", "W") if split else ("F", "BW")
    want = Counter((k, i, j) for k in kinds for i in range(m) for j in range(c))
    for acts in schedule:
        assert Counter((a.kind, a.mb, a.chunk) for a in acts) == want
        for i in range(m):  # a W never before its own B
            for j in range(c):
                if split:
                    assert acts.index(pps.Action("B", i, j)) < acts.index(pps.Action("W", i, j))


@pytest.mark.parametrize("p,m", SHAPES)
@pytest.mark.parametrize("name", pps.SCHEDULES)
def test_simulated_bubble_equals_the_formula(name, p, m):
    timeline = pps.simulate(pps.build(name, p, m))  # raises if the order deadlocks
    assert pps.idle_share(timeline) == pytest.approx(pps.bubble_formula(name, p, m), abs=1e-12)


def test_formulas_agree_with_chapter_1_and_memory_bounds_hold():
    for p, m in SHAPES:
        assert pps.bubble_formula("1f1b", p, m) == pytest.approx(bubble_fraction(p, m))
        assert pps.bubble_formula("interleaved", p, m) == pytest.approx(bubble_fraction(p, m, 2))
        one_f_one_b = pps.in_flight(pps.build("1f1b", p, m))
        assert one_f_one_b == [min(p - s, m) for s in range(p)]
        assert pps.in_flight(pps.build("zb-h1", p, m)) == one_f_one_b
        # ZB-H1 keeps 1F1B's order of forwards and input gradients; only the Ws move
        zb = [[(a.kind, a.mb) for a in acts if a.kind != "W"] for acts in pps.build("zb-h1", p, m)]
        fb = [[(a.kind[0], a.mb) for a in acts] for acts in pps.build("1f1b", p, m)]
        assert zb == fb
        assert pps.in_flight(pps.build("gpipe", p, m)) == [m] * p
    # ZB-H1 with B and W of unequal cost: Qi et al.'s (P-1)(t_f+t_b-t_w) idle per stage
    assert pps.bubble_formula("zb-h1", 4, 8, t_f=1, t_b=2, t_w=1) == pytest.approx(6 / 38)


def test_deadlocks_and_bad_shapes_are_refused():
    bad = pps.build("1f1b", 2, 2)
    bad[1] = [pps.Action("BW", 0), pps.Action("F", 0), pps.Action("F", 1), pps.Action("BW", 1)]
    with pytest.raises(RuntimeError, match="deadlocks"):
        pps.simulate(bad)
    with pytest.raises(ValueError, match="divisible"):
        pps.build("interleaved", 4, 6)
    with pytest.raises(ValueError, match="unknown schedule"):
        pps.build("2f2b", 4, 8)


def test_zbv_places_chunks_in_a_v():
    assert [pps.virtual_stage(s, c, 4, True) for c in (0, 1) for s in range(4)] == [
        0, 1, 2, 3, 7, 6, 5, 4,
    ]  # fmt: skip
    assert all(pps.stage_of(pps.virtual_stage(s, c, 4, v), 4, v) == s
               for s in range(4) for c in (0, 1) for v in (False, True))  # fmt: skip
    # Colossal-AI's own order is deadlock-free under the book's simulator and beats ZB-H1
    zbv = pps.idle_share(pps.simulate(pps.build("zbv", 4, 8), v_shape=True))
    assert zbv < pps.bubble_formula("zb-h1", 4, 8)


def test_hand_written_backward_equals_autograd():
    torch.manual_seed(0)
    blocks = tanh_blocks(3, 16, seed=3, device=torch.device("cpu"))
    x, y = torch.randn(5, 16), torch.randn(5, 16)
    chunk = Chunk([(b[0].weight, b[0].bias) for b in blocks])
    out = chunk.forward(0, x)
    g_out = 2 * (out - y) / out.numel()
    g_x = chunk.backward_input(0, g_out)
    chunk.backward_weight(0)
    x_ref = x.clone().requires_grad_()
    torch.nn.functional.mse_loss(run_blocks(blocks, x_ref), y).backward()
    torch.testing.assert_close(g_x, x_ref.grad)
    for (g_w, g_b), b in zip(chunk.grads, blocks):
        torch.testing.assert_close(g_w, b[0].weight.grad)
        torch.testing.assert_close(g_b, b[0].bias.grad)


@pytest.fixture(scope="module")
def launched():
    # Notebook 01 imports Colossal-AI, which sets CUDA_DEVICE_MAX_CONNECTIONS, a variable that is
    # part of a shared launch's key (helpers.run.shared): import it here too, so that the test
    # and the notebook share one launch.
    import colossalai  # noqa: F401

    return show.run()


def test_schedules_on_four_ranks_match_the_unsplit_model_and_their_bubbles(launched):
    rows = show.summary(launched.results)
    assert [r["name"] for r in rows] == list(show.NAMES)
    for r in launched.results:
        if "schedule" in r and "repeat" not in r:
            assert r["loss"] == r["ref_loss"] and r["max_grad_diff"] < 1e-5
    assert len(show.check_lines(rows)) == len(show.NAMES)  # asserts each bubble's tolerance
    runs = show.per_schedule(launched.results)
    assert schedules_figure(runs, rows) is not None and wall_figure(runs, rows) is not None


def test_colossal_ai_pipelines_go_as_far_as_documented(launched):
    rows = {r["step"]: r for r in show.colossal_rows(launched.results)}
    assert rows['pp_style="zbv", scheduler_nodes=None']["raised at (0.5.0)"].endswith(
        "hybrid_parallel_plugin.py:1057"
    )
    for built in ('pp_style="interleaved", num_model_chunks=2', "interleaved: booster.boost"):
        assert rows[built]["outcome"] == "ran"
    if gpu_count() < show.STAGES:  # what the page says fails on gloo ranks, and where
        line = 160 if torch.distributed.is_nccl_available() else 159  # CUDA build or CPU build
        assert rows["interleaved: booster.execute_pipeline"]["raised at (0.5.0)"] == (
            f"colossalai/pipeline/p2p.py:{line}"
        )
        assert rows["zbv: booster.boost"]["raised at (0.5.0)"] == (
            "colossalai/accelerator/cpu_accelerator.py:106"
        )


def test_exercise_8_answers_are_the_formulas():
    for name, text in (("1f1b", "7/23"), ("interleaved", "7/39"), ("zb-h1", "7/55")):
        value = pps.bubble_formula(name, 8, 16, 2)
        assert f"${text} \\approx {100 * value:.1f}\\%$" in PAGE, name
    needed = next(m for m in range(1, 200) if pps.bubble_formula("1f1b", 8, m) <= 7 / 55)
    assert needed == 48 and "$m \\ge 48$" in PAGE


def test_page_glues_the_notebook():
    nb = (ROOT / "notebooks" / "01_dimensions.ipynb").read_text()
    for key in ("ch01-fig-pp-schedules", "ch01-fig-pp-wall", "ch01-tab-pp-bubbles"):
        assert f"```{{glue}} {key}\n:doc: ../notebooks/01_dimensions.ipynb" in PAGE, key
        assert f'\\"{key}\\"' in nb or f"'{key}'" in nb, key
    assert "ch01-tab-pp-colossal" in PAGE and "ch01-tab-pp-colossal" in nb
