"""Reading a legacy Colossal-AI ``config.py`` without running it (Chapter 4, "Migrating a legacy
``config.py``").

Colossal-AI's own loader (``colossalai.context.Config.from_file``) imports the file, i.e. runs
it. Here the file is parsed with :mod:`ast` and never executed: only literals, ``dict(...)``, names
assigned earlier, ``AMP_TYPE.X`` and arithmetic are evaluated; imports are skipped and anything
else is kept as an :class:`Opaque` value, reported and not run. :mod:`helpers.config.legacy` turns
the names read here into the book's format.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.parallel.errors import ConfigError

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


@dataclass(frozen=True)
class Opaque:
    """An expression the safe evaluator does not evaluate (a call, a comprehension, ...)."""

    source: str
    line: int


class _Evaluator:
    def __init__(self, text: str):
        self.text, self.names = text, {}

    def expr(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in self.names:
                return self.names[node.id]
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            return Opaque(node.id, node.lineno)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "AMP_TYPE"
        ):
            return f"AMP_TYPE.{node.attr}"
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.expr(e) for e in node.elts]
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {self.expr(k): self.expr(v) for k, v in zip(node.keys, node.values)}
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
            and not node.args
            and all(k.arg for k in node.keywords)
        ):
            return {k.arg: self.expr(k.value) for k in node.keywords}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.expr(node.operand)
            return -v if isinstance(v, (int, float)) else Opaque(ast.unparse(node), node.lineno)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = self.expr(node.left), self.expr(node.right)
            if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
                return _OPS[type(node.op)](a, b)
        return Opaque(ast.unparse(node), node.lineno)


def parse_legacy(source: str | Path) -> tuple[dict[str, Any], list[str]]:
    """Module-level names of a legacy config (path or text), evaluated safely, and skip notes."""
    text = (
        Path(source).read_text()
        if isinstance(source, Path)
        or (isinstance(source, str) and "\n" not in source and source.endswith(".py"))
        else source
    )
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        raise ConfigError(
            f"legacy config line {e.lineno}: Python syntax error ({e.msg}); fix the file first",
            "legacy",
            e.lineno,
        ) from None
    ev, skipped = _Evaluator(text), []
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
        ):
            ev.names[stmt.targets[0].id] = ev.expr(stmt.value)
        elif not (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        ):  # docstrings are fine
            skipped.append(
                f"line {stmt.lineno}: `{ast.unparse(stmt).splitlines()[0]}` skipped (the file is "
                "parsed, never executed)"
            )
    return ev.names, skipped


def evaluated(name: str, value: Any) -> Any:
    """A value the migration uses must have been evaluated: an Opaque one is an error, not a
    guess."""
    if isinstance(value, Opaque):
        raise ConfigError(
            f"{name} = {value.source} (line {value.line}): cannot be evaluated without running the "
            "file, which migration never does; write the number itself",
            name,
            value.source,
        )
    if isinstance(value, dict):
        return {k: evaluated(f"{name}.{k}", v) for k, v in value.items()}
    return value
