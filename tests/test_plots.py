"""helpers.notebook.plots and helpers.figures.ch01_dimensions: the figures are drawn from computed
data, and show() works without myst-nb."""

import builtins

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
from helpers.notebook import plots  # noqa: E402
from helpers.figures.ch01_dimensions import (  # noqa: E402
    dp_figure,
    dp_gradients,
    gpipe_grid,
    pp_figure,
    sp_figure,
    tp_figure,
)
from helpers.parallel.pp import bubble_fraction  # noqa: E402


def test_mean_of_shard_gradients_is_the_full_batch_gradient():
    g = dp_gradients(world=4, batch=8)
    np.testing.assert_allclose(g["all-reduce / P"], g["full batch"], rtol=1e-5, atol=1e-6)
    assert not np.allclose(g["rank 0"], g["full batch"])  # one shard alone is not enough


@pytest.mark.parametrize("p, m", [(2, 1), (4, 4), (4, 8), (3, 5)])
def test_gpipe_grid_idles_exactly_the_bubble(p, m):
    grid = gpipe_grid(p, m)
    assert grid.shape == (p, 2 * (m + p - 1))
    for stage in grid:  # every stage runs each forward and backward once
        assert sorted(stage[stage > 0]) == list(range(1, m + 1))
        assert sorted(-stage[stage < 0]) == list(range(1, m + 1))
    assert (grid == 0).mean() == pytest.approx(bubble_fraction(p, m))
    assert list(-grid[-1][grid[-1] < 0]) == list(range(m, 0, -1))  # B(m-1) .. B0, as gpipe_order


def test_every_figure_draws():
    for fig in (dp_figure(), tp_figure(), pp_figure(), sp_figure()):
        assert fig.axes
        matplotlib.pyplot.close(fig)


def test_show_displays_without_myst_nb(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_myst_nb(name, *args, **kwargs):
        if name.startswith("myst_nb"):
            raise ImportError("myst_nb is not installed")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_myst_nb)
    plots.show(pp_figure(), "ch01-fig-pp")
    assert "Figure" in capsys.readouterr().out
