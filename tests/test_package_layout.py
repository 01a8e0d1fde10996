"""The package's layout rules (helpers/__init__.py is the map): subpackages by concept, files of at
most 300 lines, demos as entry points that nothing imports, and pointers the reader can follow."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HELPERS = ROOT / "helpers"
DATA = HELPERS / "configs"  # example config files (legacy config.py files are data, never imported)
MODULES = sorted(p for p in HELPERS.rglob("*.py") if DATA not in p.parents)


def test_the_top_level_holds_only_subpackages():
    assert [p.name for p in HELPERS.glob("*.py")] == ["__init__.py"]
    for folder in HELPERS.iterdir():
        if folder.is_dir() and folder != DATA and any(folder.glob("*.py")):
            assert (folder / "__init__.py").is_file(), folder


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(HELPERS)))
def test_a_module_is_at_most_300_lines_and_says_what_it_serves(path):
    text = path.read_text()
    assert len(text.splitlines()) <= 300
    assert ast.get_docstring(ast.parse(text)), f"{path} has no module docstring"


def _imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_nothing_imports_a_demo():
    offenders = []
    for path in MODULES + sorted((ROOT / "tests").glob("*.py")):
        demos = {
            n for n in _imported(ast.parse(path.read_text())) if n.startswith("helpers.demos.")
        }
        if demos:
            offenders.append((str(path.relative_to(ROOT)), sorted(demos)))
    assert not offenders


def test_pointers_name_what_the_reader_has():
    """Chapters, sections, papers and upstream files; not the tracker of this project."""
    pattern = re.compile(r"issues? #?[0-9]|formulas\.md|the brief")
    found = []
    for folder, glob in (("helpers", "*.py"), ("book", "*.md"), ("notebooks", "*.ipynb")):
        for path in sorted((ROOT / folder).rglob(glob)):
            found += [
                f"{path.relative_to(ROOT)}: {m.group(0)}"
                for m in pattern.finditer(path.read_text())
            ]
    assert not found


FIGURES = HELPERS / "figures"
DRAWS = ("subplots", "figure", "subplot_mosaic")  # plt.<one of these>(...) makes a figure


def _draws(tree: ast.AST) -> list[int]:
    """Lines that make a matplotlib figure: ``plt.subplots(...)``, ``plt.figure(...)``, ..."""
    return [
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in DRAWS
        and getattr(n.func.value, "id", None) in ("plt", "pyplot")
    ]


def test_figures_are_drawn_in_one_package():
    """Every figure the book shows is drawn in ``helpers.figures``; chapters, records and the
    notebook tools pass data in and show what comes back."""
    outside = [
        f"{p.relative_to(ROOT)}:{line}"
        for p in MODULES
        if FIGURES not in p.parents
        for line in _draws(ast.parse(p.read_text()))
    ]
    assert not outside, "a figure drawn outside helpers/figures:\n" + "\n".join(outside)
    assert all(
        _draws(ast.parse(p.read_text()))
        for p in FIGURES.glob("*.py")
        if p.stem != "style" and p.stem != "__init__"
    )


MAX_CELL_LINES = 20


def test_a_notebook_code_cell_is_at_most_20_lines():
    """A cell the reader can take in at once; longer glue belongs in the chapter's module."""
    import json

    long = [
        f"{nb.name} cell {i}: {n} lines"
        for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))
        for i, cell in enumerate(json.loads(nb.read_text())["cells"])
        if cell["cell_type"] == "code"
        and (n := len("".join(cell["source"]).splitlines())) > MAX_CELL_LINES
    ]
    assert not long, "\n".join(long)
