"""The figures' shared style and display, for every chapter's notebook.

:data:`RANK_COLOURS` gives rank ``r`` the same colour in every figure of the book, :data:`DPI` their
resolution; :func:`show` displays a figure in the notebook and glues it under a key, so the chapter
page can paste the same image. The figures themselves are in
:mod:`helpers.notebook.plots_ch01_dimensions` (Chapter 1), :mod:`helpers.notebook.plots_ch02_mesh`
(Chapter 2), :mod:`helpers.notebook.plots_ch05_resume` (Chapter 5), the timelines of
:mod:`helpers.notebook.plots_timeline` and the ``helpers.chapters``
modules.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap


RANK_COLOURS = [
    "#4C72B0",
    "#DD8452",
    "#55A868",
    "#C44E52",
    "#8172B3",
    "#937860",
    "#DA8BC3",
    "#8C8C8C",
]


DPI = 80


def show(fig, key: str) -> None:
    """Display ``fig`` in the notebook, glue it as ``key`` for the book page, and close it.

    Without myst-nb (a GPU box that has only the notebook tools) the figure is just displayed.
    """
    try:
        from myst_nb import glue
    except ImportError:
        from IPython.display import display

        display(fig)
    else:
        glue(key, fig, display=True)
    plt.close(fig)


def rank_cmap(n: int) -> ListedColormap:
    """A colour map of the first ``n`` rank colours, for ``imshow`` of a map of owning ranks."""
    return ListedColormap(RANK_COLOURS[:n])
