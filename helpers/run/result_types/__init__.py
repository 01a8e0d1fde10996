"""What each demo's ``RESULT`` line holds: one TypedDict per kind of result, a module per chapter.

A demo passes its type to :func:`helpers.run.env.emit` (``emit(DpResult, world_size=..., ...)``),
which checks the keys against it before the line leaves the rank; the readers (``chapters``,
``record``, notebooks) annotate what they read with the same type, and
``tests/test_result_types.py`` checks every string key they look up on such a value. A renamed key
then fails a test, not a notebook cell at review. The types live in ``run``, the layer of
:func:`~helpers.run.env.emit`, because nothing imports a demo; they import nothing but
:mod:`typing`.
"""

from typing import TypedDict


class Emitted(TypedDict):
    """The key :func:`helpers.run.env.emit` adds to every result."""

    rank: int
