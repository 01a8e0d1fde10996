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
