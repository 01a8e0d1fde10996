"""The one error a bad configuration raises (Chapter 4, "The rules, and who would complain
otherwise").

Every rule of :mod:`helpers.config.rules`, every pydantic error translated by
:mod:`helpers.config.hints` and every file problem of :mod:`helpers.config.loading` becomes one
:class:`ConfigError` whose message names the field, the value and how to fix it.
"""

from __future__ import annotations

from typing import Any


class ConfigError(ValueError):
    """A configuration is invalid: one message naming the field, the value and a fix."""

    def __init__(self, message: str, field: str | None = None, value: Any = None):
        super().__init__(message)
        self.field, self.value = field, value
        self.rule: str | None = None  # the name of the broken rule of helpers.config.rules.RULES


def fail(field: str, value: Any, problem: str, fix: str) -> ConfigError:
    """``field = value: problem; fix`` as a ConfigError (a value in parentheses is shown bare)."""
    shown = value if isinstance(value, str) and value.startswith("(") else repr(value)
    return ConfigError(f"{field} = {shown}: {problem}; {fix}", field, value)
