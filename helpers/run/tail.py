"""torchrun's ``--tee`` output, put back into whole lines per rank (Chapter 1, "Where the ranks
run").

With ``--tee`` each rank writes to a log file and one thread per rank in torchrun copies that file
to torchrun's stdout, a line at a time, behind a ``[defaultN]:`` header
(``torch/distributed/elastic/multiprocessing/tail_log.py``, ``tail_logfile``). When that thread
reads while the rank is still writing a long line, ``readline`` returns the part written so far:
it is copied out *without* a newline, and the rest follows later under its own header, possibly
after other ranks' lines. A long ``RESULT`` line then reaches the launcher in pieces.

:class:`Joiner` undoes this: every header that is not at the end of a physical line marks the
piece before it as unfinished, and a rank's pieces are joined until one ends with a newline.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"\[default(\d+)\]:")


class Joiner:
    """Feed it torchrun's stdout line by line; it returns whole lines, ``[defaultN]:text``."""

    def __init__(self) -> None:
        self._open: dict[str, str] = {}  # rank -> the unfinished start of its line

    def feed(self, raw: str) -> list[str]:
        """The whole lines that ``raw`` (one physical line, newline stripped) completes."""
        heads = list(_HEADER.finditer(raw))
        if not heads:
            return [raw]
        out = [raw[: heads[0].start()]] if heads[0].start() > 0 else []
        for i, head in enumerate(heads):
            end = heads[i + 1].start() if i + 1 < len(heads) else len(raw)
            rank, piece = head.group(1), raw[head.end() : end]
            text = self._open.pop(rank, "") + piece
            if i + 1 < len(heads):  # another header follows on this line: the piece is unfinished
                self._open[rank] = text
            else:
                out.append(f"[default{rank}]:{text}")
        return out

    def rest(self) -> list[str]:
        """Pieces still unfinished when the output closed (a rank killed mid-line)."""
        rest = [f"[default{rank}]:{text}" for rank, text in self._open.items()]
        self._open.clear()
        return rest
