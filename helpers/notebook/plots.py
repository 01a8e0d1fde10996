"""A figure in the notebook: :func:`show` displays it and glues it under a key, so the chapter page
can paste the same image. The figures' shared style is :mod:`helpers.figures.style`; the figures
themselves are in :mod:`helpers.figures`,
:mod:`helpers.notebook.plots_ch01_dimensions` (Chapter 1), :mod:`helpers.notebook.plots_ch02_mesh`
(Chapter 2), :mod:`helpers.notebook.plots_ch05_resume` (Chapter 5), the timelines of
:mod:`helpers.figures.timeline` and the ``helpers.chapters``
modules.
"""

from __future__ import annotations

import matplotlib.pyplot as plt


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
