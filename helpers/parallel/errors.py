"""The one error a bad configuration raises (Chapter 4, "The rules, and who would complain
otherwise").

Every rule of :mod:`helpers.config.rules`, every pydantic error translated by
:mod:`helpers.config.hints` and every file problem of :mod:`helpers.config.loading` becomes one
:class:`ConfigError` whose message names the field, the value and how to fix it. A setting that
runs but means less than it says (a save interval longer than the run) is a
:class:`ConfigWarning` in the same words. A value is shown as at most :data:`SHOWN` characters:
a message quotes the input, never a value grown past it. It sits beside the layout rules
(:mod:`helpers.parallel.layout_rules`), which raise it too, below the package that reads files.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

SHOWN = 120  # characters of a value a message shows
# where the rules live: a warning points past them, at the line that loaded the config
RULE_FOLDERS = tuple(str(Path(__file__).parents[1] / d) + "/" for d in ("parallel", "config"))


class ConfigError(ValueError):
    """A configuration is invalid: one message naming the field, the value and a fix."""

    def __init__(self, message: str, field: str | None = None, value: Any = None):
        super().__init__(message)
        self.field, self.value = field, value
        self.rule: str | None = None  # the name of the broken rule of helpers.config.rules.RULES


class ConfigWarning(UserWarning):
    """A configuration runs, but a setting means less than it says: field, value and a fix."""


def shown(value: Any) -> str:
    """``repr(value)`` cut to :data:`SHOWN` characters (a value in parentheses is shown bare)."""
    text = value if isinstance(value, str) and value.startswith("(") else repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}… ({len(text):,} characters)"


def fail(field: str, value: Any, problem: str, fix: str) -> ConfigError:
    """``field = value: problem; fix`` as a ConfigError (a value in parentheses is shown bare)."""
    return ConfigError(f"{field} = {shown(value)}: {problem}; {fix}", field, value)


def warn(message: str) -> None:
    """Issue ``message`` as a :class:`ConfigWarning` at the caller's line: the first frame outside
    the rules (:data:`RULE_FOLDERS`) and pydantic (where the config was loaded)."""
    level, frame = 2, sys._getframe(1)
    while frame is not None and (
        frame.f_code.co_filename.startswith(RULE_FOLDERS) or "pydantic" in frame.f_code.co_filename
    ):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, ConfigWarning, stacklevel=level)
