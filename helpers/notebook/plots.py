"""A figure in the notebook: :func:`show` displays it and glues it under a key, so the chapter page
can paste the same image. Every figure is drawn in :mod:`helpers.figures` (one module per chapter's
figures, e.g. :mod:`helpers.figures.ch01_dimensions`; their shared style is
:mod:`helpers.figures.style`); the notebooks pass each one here.
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
