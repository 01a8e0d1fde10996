"""The style every figure of the book shares: :data:`RANK_COLOURS` gives rank ``r`` the same colour
in every figure, :data:`DPI` their resolution, :func:`rank_cmap` a colour map of owning ranks. A
notebook shows and glues a figure with :func:`helpers.notebook.plots.show`.
"""

from __future__ import annotations

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


def rank_cmap(n: int) -> ListedColormap:
    """A colour map of the first ``n`` rank colours, for ``imshow`` of a map of owning ranks."""
    return ListedColormap(RANK_COLOURS[:n])
