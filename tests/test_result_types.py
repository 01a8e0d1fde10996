"""Each demo's result has a type (``helpers/run/result_types``), and the readers' keys are checked.

(a) every ``emit(...)`` in a demo passes its TypedDict first (:func:`helpers.run.env.emit` checks
the keys when the line is written); (b) every string key that ``helpers/chapters``,
``helpers/figures``, ``helpers/record`` and the notebooks look up on a value known to be a typed
result (a parameter or variable annotated with one, a ``list[...]`` of them, an element of such a
list, or the value of a helpers function annotated to return one) is a key of that type; (c)
renaming a key in a copy of a type makes (b) report the reader's lookup.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HELPERS = ROOT / "helpers"
TYPES = HELPERS / "run" / "result_types"
READERS = [p for d in ("chapters", "record", "figures") for p in sorted((HELPERS / d).glob("*.py"))]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CONTAINERS = {"list", "tuple", "Iterable", "Iterator", "Sequence"}
TRANSPARENT = {"Optional", "NotRequired", "Required"}

# Demos that other parts of the book have under way; each is reported (xfail) until it is typed.
PENDING: dict[str, str] = {}


def type_keys(sources: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """{TypedDict name: {key: its annotation's source}}, inherited keys included, from the type
    modules' syntax trees (a subclass may narrow a key: ``runs: list[FlagshipRun]``)."""
    if sources is None:
        sources = {p.name: p.read_text() for p in sorted(TYPES.glob("*.py"))}
    own: dict[str, dict[str, str]] = {}
    bases: dict[str, list[str]] = {}
    for text in sources.values():
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef):
                own[node.name] = {
                    s.target.id: ast.unparse(s.annotation)
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
                bases[node.name] = [ast.unparse(b).split(".")[-1] for b in node.bases]

    def keys(name: str) -> dict[str, str]:  # a base in any module, before or after its subclass
        inherited = {}
        for b in bases.get(name, []):
            inherited.update(keys(b) if b in own else {})
        return {**inherited, **own[name]}

    return {name: keys(name) for name in own}


def _type_of_annotation(node, types) -> tuple[str, int] | None:
    """(result type, depth) of an annotation: T -> (T, 0), list[T] -> (T, 1), T | None -> (T, 0),
    NotRequired[T] -> (T, 0)."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        node = ast.parse(node.value, mode="eval").body
    if isinstance(node, ast.Name):
        return (node.id, 0) if node.id in types else None
    if isinstance(node, ast.Attribute):
        return (node.attr, 0) if node.attr in types else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _type_of_annotation(node.left, types) or _type_of_annotation(node.right, types)
    outer = isinstance(node, ast.Subscript) and ast.unparse(node.value).split(".")[-1]
    if outer in CONTAINERS or outer in TRANSPARENT:
        inner = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
        found = _type_of_annotation(inner, types)
        return found and (found[0], found[1] + (0 if outer in TRANSPARENT else 1))
    return None


def _imports(tree) -> dict[str, tuple[str, str | None]]:
    """{local name: (module stem, function or None)} of a tree's ``helpers`` imports."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers"):
            for a in node.names:
                out[a.asname or a.name] = (node.module.split(".")[-1], a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("helpers") and a.asname:
                    out[a.asname] = (a.name.split(".")[-1], None)
    return out


def _stem(where) -> str | None:
    return Path(where).stem if isinstance(where, str) and where.endswith(".py") else None


def returns(trees, types) -> dict:
    """{(module stem, function name): the result type it is annotated to return} over the readers
    (``trees``: {path: tree}), and {function name: type} where that name has one type only."""
    items = trees.items() if isinstance(trees, dict) else ((None, t) for t in trees)
    out, by_name = {}, {}
    for where, tree in items:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found = _type_of_annotation(node.returns, types)
                by_name.setdefault(node.name, set()).add(found)
                if found:
                    out[(_stem(where), node.name)] = found
    out.update({n: next(iter(f)) for n, f in by_name.items() if len(f) == 1 and None not in f})
    return out


def _constants(tree) -> dict[str, str]:
    """The module-level string constants of a tree (``DEMO = "ch07_offload"``)."""
    return {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, str)
        for t in n.targets
        if isinstance(t, ast.Name)
    }


def lookups(
    tree, types, returned, where=None, demos=None
) -> tuple[list[tuple[int, str, str]], int]:
    """([(line, type, key)] of string-key lookups on typed values, count of all string-key
    lookups): each top-level function or class is a scope, the module's other statements one.
    ``where``: the tree's path, for calls of the module's own functions. ``demos``: {demo: result
    type} (:func:`demo_types`), so that ``launch("demo", ...)`` is a launch of that demo, whose
    ``.results``, ``.rank(r)`` and ``.first(r)`` hold its type."""
    scopes = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    rest = ast.Module([n for n in tree.body if n not in scopes], [])
    calls = _Calls(returned, _stem(where), _imports(tree), demos or {}, _constants(tree))
    checked, total = [], 0
    for scope in scopes + [rest]:
        found, n = _scope_lookups(scope, types, calls)
        checked, total = checked + found, total + n
    return checked, total


class _Calls:
    """The result type a call returns: ``f()`` (this module's, or imported by name), ``mod.f()``
    (``mod`` an imported helpers module), else by the function's name where it is unambiguous."""

    def __init__(self, returned, stem, imports, demos=None, constants=None):
        self.returned, self.stem, self.imports = returned, stem, imports
        self.demos, self.constants = demos or {}, constants or {}

    def launched(self, call) -> tuple[str, int] | None:
        """``(LAUNCHED + type, 0)`` for ``launch(demo, ...)`` of a demo with one result type."""
        name = getattr(call.func, "id", None) or getattr(call.func, "attr", None)
        if name != "launch":
            return None
        demo = call.args[0] if call.args else None
        demo = next((k.value for k in call.keywords if k.arg == "demo"), demo)
        if isinstance(demo, ast.Name):
            demo = self.constants.get(demo.id)
        elif isinstance(demo, ast.Constant):
            demo = demo.value
        found = self.demos.get(demo) if isinstance(demo, str) else None
        return (LAUNCHED + found, 0) if found else None

    def type_of(self, func):
        if isinstance(func, ast.Name):
            module, name = self.imports.get(func.id, (self.stem, func.id))
            return self.returned.get((module, name)) or self.returned.get(func.id)
        if isinstance(func, ast.Attribute):
            owner = getattr(func.value, "id", None)
            module = self.imports.get(owner, (owner, None))[0]
            return self.returned.get((module, func.attr)) or self.returned.get(func.attr)
        return None


def _get_key(node) -> str | None:
    """``k`` of ``x.get("k")`` / ``x.get("k", default)``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


PASSING = {"sorted", "list", "reversed", "tuple"}  # f(xs) holds the elements of xs
LAUNCHED = "launch of "  # the type of launch(demo): a LaunchResult whose results have demo's type
LAUNCH_PARTS = {"results": 1, "rank": 1, "first": 0}  # .results, .rank(r): a list; .first(r): one


def _scope_lookups(tree, types, calls) -> tuple[list[tuple[int, str, str]], int]:
    known: dict[str, tuple[str, int]] = {}

    def field(expr, key):
        outer = type_of(expr)
        if not (outer and outer[1] == 0 and key in types.get(outer[0], ())):
            return None
        return _type_of_annotation(types[outer[0]][key], types)

    def type_of(expr):
        if isinstance(expr, ast.Name):
            return known.get(expr.id)
        if isinstance(expr, ast.Subscript):
            if _key(expr):  # x["k"] on a typed value: the key's own type
                return field(expr.value, _key(expr))
            if isinstance(expr.slice, ast.Slice):
                return type_of(expr.value)
            outer = type_of(expr.value)
            return outer and outer[1] > 0 and (outer[0], outer[1] - 1)
        if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
            inner = type_of(expr.elt)
            return inner and (inner[0], inner[1] + 1)
        if isinstance(expr, ast.Attribute) and expr.attr == "results":
            return part(expr.value, "results")
        if isinstance(expr, ast.BoolOp):
            return type_of(expr.values[0])
        if isinstance(expr, ast.IfExp):
            return type_of(expr.body) or type_of(expr.orelse)
        if isinstance(expr, ast.Call):
            if _get_key(expr) is not None:
                return field(expr.func.value, _get_key(expr))
            name = getattr(expr.func, "id", None)
            if name == "next" and expr.args:
                inner = type_of(expr.args[0])
                return inner and inner[1] > 0 and (inner[0], inner[1] - 1)
            if name in PASSING and expr.args:
                return type_of(expr.args[0])
            method = getattr(expr.func, "attr", None)
            launched = method in ("rank", "first") and part(expr.func.value, method)
            return launched or calls.launched(expr) or calls.type_of(expr.func)
        return None

    def part(launched, name):  # a launch's .results, .rank(r) or .first(r)
        outer = type_of(launched)
        if outer and outer[0].startswith(LAUNCHED):
            return (outer[0][len(LAUNCHED) :], LAUNCH_PARTS[name])
        return None

    def bind(target, found, seen):
        """Bind ``target`` in this statement; a name bound to two types here is left unknown."""
        if not isinstance(target, ast.Name):
            return
        seen.setdefault(target.id, set()).add(found or None)
        if found:
            known[target.id] = found

    def statement(stmt) -> None:
        """The bindings ``stmt`` makes (to a fixed point: loops, comprehensions), after those of
        the statements before it: a name bound again to something untyped is unknown after."""
        seen: dict[str, set] = {}
        for node in ast.walk(stmt):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                for a in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
                    found = _type_of_annotation(getattr(a, "annotation", None), types)
                    if found:
                        known[a.arg] = found
            elif isinstance(node, ast.AnnAssign):
                bind(node.target, _type_of_annotation(node.annotation, types), {})
        for _ in range(4):
            seen.clear()
            for node in ast.walk(stmt):
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                        bind(node.targets[0], type_of(node.value), seen)
                elif isinstance(node, ast.NamedExpr):
                    bind(node.target, type_of(node.value), seen)
                elif isinstance(node, (ast.For, ast.comprehension)):
                    outer = type_of(node.iter)
                    found = outer and outer[1] > 0 and (outer[0], outer[1] - 1)
                    bind(node.target, found, seen)
        for name, found in seen.items():
            if len(found) > 1 or None in found:
                known.pop(name, None)

    def count(stmt) -> None:
        for node in ast.walk(stmt):
            key, base = _key(node), None
            if key is not None and isinstance(node, ast.Subscript):
                base = node.value
            elif _get_key(node) is not None:
                key, base = _get_key(node), node.func.value
            if base is None:
                continue
            counted[0] += 1
            found = type_of(base)
            if found and found[1] == 0 and found[0] in types:
                checked.append((node.lineno, found[0], key))

    # one statement after another: a notebook binds ``res`` many times
    checked, counted = [], [0]
    body = tree.body if isinstance(tree, (ast.Module, ast.ClassDef)) else [tree]
    if isinstance(tree, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for a in tree.args.args + tree.args.kwonlyargs + tree.args.posonlyargs:
            found = _type_of_annotation(a.annotation, types)
            if found:
                known[a.arg] = found
        body = tree.body
        for d in tree.decorator_list + tree.args.defaults + tree.args.kw_defaults:
            if d is not None:
                count(d)
    for stmt in body:
        statement(stmt)
        count(stmt)
    return checked, counted[0]


def _key(node) -> str | None:
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value if isinstance(node.slice.value, str) else None
    return None


def notebook_code(path: Path) -> str:
    """A notebook's code cells as one module (IPython lines left out)."""
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    lines = [ln for c in code for ln in c.splitlines() if not re.match(r"\s*[%!]", ln)]
    return "\n".join(lines)


def reader_trees() -> dict[str, ast.AST]:
    trees = {str(p.relative_to(ROOT)): ast.parse(p.read_text()) for p in READERS}
    for nb in NOTEBOOKS:
        try:
            trees[str(nb.relative_to(ROOT))] = ast.parse(notebook_code(nb))
        except SyntaxError:
            continue
    return trees


def unknown_keys(types: dict[str, set[str]]) -> tuple[list[str], int, int]:
    """(reader lookups whose key the type lacks, lookups checked, all string-key lookups)."""
    trees = reader_trees()
    returned, demos = returns(trees, types), demo_types()
    bad, checked, total = [], 0, 0
    for where, tree in trees.items():
        found, n = lookups(tree, types, returned, where, demos)
        total += n
        checked += len(found)
        bad += [f"{where}:{line}: {t}[{k!r}]" for line, t, k in found if k not in types[t]]
    return bad, checked, total


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


@functools.cache
def _emit_calls(path: Path) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(_tree(path))
        if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "emit"
    ]


def _demo_emits() -> dict[str, list[ast.Call]]:
    out = {}
    for path in sorted((HELPERS / "demos").glob("*.py")):
        if calls := _emit_calls(path):
            out[path.stem] = calls
    return out


def _library_emits() -> dict[str, list[ast.Call]]:
    """The ``emit`` calls of helpers modules that are not demos (the loops demos share)."""
    out = {}
    for path in sorted(HELPERS.rglob("*.py")):
        where = str(path.relative_to(ROOT))
        if path.parent.name != "demos" and where != "helpers/run/env.py":
            if calls := _emit_calls(path):
                out[where] = calls
    return out


@functools.cache
def _helpers_imports(path: Path) -> frozenset[Path]:
    """The helpers modules ``path`` imports (at the top or inside a function)."""
    out = set()
    for node in ast.walk(_tree(path)):
        names = []
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers"):
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("helpers")]
        for name in names:
            found = ROOT / (name.replace(".", "/") + ".py")
            if found.exists():
                out.add(found)
    return frozenset(out)


@functools.cache
def demo_types() -> dict[str, str]:
    """{demo: its result type} for the demos whose every ``emit``, in the demo and in the helpers
    modules it imports (to any depth), passes the same type."""
    out = {}
    for path in sorted((HELPERS / "demos").glob("*.py")):
        seen, todo = set(), [path]
        while todo:
            p = todo.pop()
            if p not in seen:
                seen.add(p)
                todo += _helpers_imports(p)
        calls = [c for p in seen for c in _emit_calls(p) if p.name != "env.py"]
        names = {ast.unparse(c.args[0]).split(".")[-1] if c.args else None for c in calls}
        if len(names) == 1 and None not in names:
            out[path.stem] = names.pop()
    return out


@pytest.mark.parametrize("demo", sorted(_demo_emits()))
def test_every_demo_emits_its_result_type(demo):
    if demo in PENDING:
        pytest.xfail(PENDING[demo])
    types = type_keys()
    for call in _demo_emits()[demo]:
        assert call.args, f"helpers/demos/{demo}.py:{call.lineno}: emit(...) without its type"
        name = ast.unparse(call.args[0])
        assert name in types, f"helpers/demos/{demo}.py:{call.lineno}: {name} is no result type"


@pytest.mark.parametrize("module", sorted(_library_emits()))
def test_every_shared_loop_emits_its_result_type(module):
    """A loop that demos share (Chapter 5's training loop, the frameworks' bench) types its
    results too, so that a launch's results are known only when every emit it can reach agrees."""
    types = type_keys()
    for call in _library_emits()[module]:
        assert call.args, f"{module}:{call.lineno}: emit(...) without its type"
        assert ast.unparse(call.args[0]) in types, f"{module}:{call.lineno}"


def test_pending_demos_still_exist():
    assert set(PENDING) <= set(_demo_emits())


def test_emit_names_the_type_and_the_key():
    from helpers.run.env import check_keys
    from helpers.run.result_types.ch01 import DpResult

    good = {k: 0 for k in type_keys()["DpResult"]}
    check_keys(DpResult, good)
    with pytest.raises(KeyError, match=r"ch01\.DpResult: missing key 'loss'"):
        check_keys(DpResult, {k: v for k, v in good.items() if k != "loss"})
    with pytest.raises(KeyError, match=r"undeclared key 'losss'"):
        check_keys(DpResult, {**good, "losss": 1.0})


def test_every_key_a_reader_looks_up_on_a_typed_result_exists():
    bad, checked, _ = unknown_keys(type_keys())
    assert checked > 0
    assert not bad, "\n".join(bad)


def test_a_renamed_key_fails_at_its_reader():
    types = type_keys()
    bad, _, _ = unknown_keys(types)
    assert not bad
    trees = reader_trees()
    returned = returns(trees, types)
    sources = {p.name: p.read_text() for p in sorted(TYPES.glob("*.py"))}

    def body(name: str) -> tuple[str, int, int]:  # the type's module, and where its class is
        module = next(m for m, text in sources.items() if f"class {name}(" in text)
        start = sources[module].index(f"class {name}(")
        end = sources[module].find("\nclass ", start + 1)
        return module, start, len(sources[module]) if end < 0 else end

    def own(name: str, key: str) -> bool:
        module, start, end = body(name)
        return f"    {key}:" in sources[module][start:end]

    where, line, name, key = next(
        (w, *f)
        for w, t in trees.items()
        for f in lookups(t, types, returned, w, demo_types())[0]
        if own(f[1], f[2])
    )
    module, start, end = body(name)
    text = sources[module]
    renamed = (
        text[:start] + text[start:end].replace(f"    {key}:", f"    {key}_renamed:") + text[end:]
    )
    bad, _, _ = unknown_keys(type_keys({**sources, module: renamed}))
    assert f"{where}:{line}: {name}[{key!r}]" in bad


def test_a_key_marked_not_required_is_optional_at_run_time():
    """``from __future__ import annotations`` in a type module would make every key required."""
    import importlib

    for path in sorted(TYPES.glob("*.py")):
        module = importlib.import_module(f"helpers.run.result_types.{path.stem}")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                marked = {
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and "NotRequired" in ast.unparse(s.annotation)
                }
                assert marked <= getattr(module, node.name).__optional_keys__, node.name


def test_a_stored_offload_record_matches_its_type():
    """The offload recorder measures its rows in its own process (no ``emit``): it checks each
    row against ``OffloadRun`` before it saves, and the stored records hold to the same type."""
    from helpers.run.env import check_keys
    from helpers.run.result_types.ch07 import OffloadRecord, OffloadRun

    stored = sorted((ROOT / "results").glob("*/ch07_offload*.json"))
    assert stored
    for path in stored:
        record = json.loads(path.read_text())
        check_keys(OffloadRecord, record)
        for run in record["runs"]:
            check_keys(OffloadRun, run)


def test_stored_run_summaries_and_verdicts_match_their_types():
    """Every flagship row stored under ``results/`` (a run's ``summary``, a head-to-head's
    ``compare``) holds to ``RunSummary`` and ``Verdict``, the types its readers annotate."""
    from helpers.run.env import check_keys
    from helpers.run.result_types.records import RunSummary, Verdict

    summaries = 0
    for path in sorted((ROOT / "results").glob("*/*.json")):
        record = json.loads(path.read_text())
        for run in record.get("runs", []):
            if isinstance(run, dict) and "summary" in run:
                check_keys(RunSummary, run["summary"])
                summaries += 1
        for verdict in record.get("compare") or []:
            check_keys(Verdict, verdict)
    assert summaries >= 40
