"""helpers.figures.timeline: the idle share of a window and the Gantt drawing."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from helpers.figures.timeline import KIND_COLOURS, idle_fraction, timeline  # noqa: E402


def test_idle_fraction_counts_overlaps_once_and_clips_to_the_window():
    intervals = [(0.0, 2.0, "compute"), (1.0, 3.0, "communication"), (5.0, 12.0, "compute")]
    # busy: [0, 3] and [5, 10] of the window [0, 10] -> 8 of 10
    assert idle_fraction(intervals, 0.0, 10.0) == pytest.approx(0.2)
    assert idle_fraction([], 0.0, 1.0) == 1.0
    with pytest.raises(ValueError, match="empty window"):
        idle_fraction(intervals, 1.0, 1.0)


def test_timeline_draws_one_bar_per_interval_and_a_legend_of_kinds():
    rows = {
        "stage 0": [(0.0, 0.001, "forward"), (0.003, 0.005, "backward")],
        "stage 1": [(0.001, 0.002, "forward"), (0.002, 0.004, "mystery")],
    }
    fig = timeline(rows, title="t", labels={"stage 0": ["F0", "B0"]})
    ax = fig.axes[0]
    assert len(ax.patches) == 4
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["forward", "backward", "mystery"]
    assert [t.get_text() for t in ax.texts] == ["F0", "B0"]
    assert ax.get_xlim()[1] >= 5.0  # milliseconds from the first start
    assert "forward" in KIND_COLOURS
    with pytest.raises(ValueError):
        timeline({})
