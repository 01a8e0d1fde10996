"""Chapter 12's planner runs: the published layouts ranked by Chapter 3's planner, and the scale
simulation of Llama 3 405B."""

from helpers.chapters import ch12_planner as planner


def test_published_layouts_rank_among_the_planner_s():
    one = planner.rank_run("MEG-1.7B")
    assert one["published rank"] == 1 and one["gain %"] == 0.0
    assert planner.rank_run("ALPACA")["published rank"] == 1
    l3 = planner.rank_run("L3-16K GPUs")
    assert l3["published D×T×P"] == "128×8×16" and l3["gain %"] > 0
    assert l3["its sharding, mb, recompute"].startswith("FSDP")
    assert "DSV3" not in planner.PLANNED and len(planner.PLANNED) == 15


def test_scale_simulation():
    best, fixed = planner.scale_rows(False), planner.scale_rows(True)
    assert [r["GPUs"] for r in best] == list(planner.SCALE_GPUS)
    assert [r["layout"] for r in best[:2]] == ["nothing fits"] * 2 and "step s" in best[2]
    runs = [r for r in fixed if "MFU %" in r]
    assert runs[0]["GPUs"] == 128 and runs[-1]["GPUs"] == 16384
    assert all("interleaved c=2" in r["layout"] and r["recompute"] == "none" for r in runs)
    steps = [r["step s"] for r in runs]
    assert steps == sorted(steps, reverse=True)  # still shorter, but less and less
    bubbles = [r["bubble %"] for r in runs]
    assert bubbles == sorted(bubbles) and bubbles[-1] > 25 and runs[-1]["m"] == 16


def test_tensor_parallelism_never_leaves_the_node_in_the_simulation():
    best = [r for r in planner.scale_rows(False) if "step s" in r]
    tps = {int(r["layout"].split(" × ")[1].removeprefix("T=")) for r in best}
    assert max(tps) <= 8
