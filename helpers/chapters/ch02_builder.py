"""Chapter 2's builder analogy (notebook 02, section 5): 2 crews × 4 sections × 4 trades = 32
workers, a :class:`helpers.parallel.mesh.RankMesh` with dp = crew, pp = section and tp = trade.

:func:`partner_line` says, in the analogy's words, whom a worker talks to along one axis, and
:func:`builder_numbers` counts the groups and partners that the page glues; the notebook finds the
partners with the mesh itself and asserts that each differs from the worker along that axis only.
"""

from __future__ import annotations

from helpers.parallel.mesh import RankMesh

TRADES = ["paint", "floor", "light", "plumb"]
# per axis: what a worker does with its partners along it, and the word for a position on it
VERBS = {
    "tp": ("works beside", "trade"),
    "pp": ("hands floors on to", "section"),
    "dp": ("compares notes with", "crew"),
}


def partner_line(mesh: RankMesh, axis: str, partners: list[int]) -> str:
    """``  works beside        20 (paint), 22 (light), 23 (plumb)``: the partners along ``axis``,
    each named by its trade (tp) or by its position on the axis."""
    verb, word = VERBS[axis]
    name = {
        r: TRADES[mesh.coords(r)["tp"]] if axis == "tp" else f"{word} {mesh.coords(r)[axis]}"
        for r in partners
    }
    return f"  {verb:19s} " + ", ".join(f"{r} ({name[r]})" for r in partners)


def builder_numbers(mesh: RankMesh, partners: int) -> dict[str, int]:
    """The groups of each axis and a worker's ``partners``, under the keys the page glues."""
    return {
        "ch02-builder-tp-groups": len(mesh.groups("tp")),
        "ch02-builder-pp-groups": len(mesh.groups("pp")),
        "ch02-builder-dp-groups": len(mesh.groups("dp")),
        "ch02-builder-partners": partners,
    }
