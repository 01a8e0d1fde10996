"""What a notebook runs live, and where, on a machine with 0, 1, 2 or 8 GPUs.

Each notebook prints this table in its first cells (every chapter; the rule itself is Chapter 1's
"Where the ranks run"). The table is computed, not typed: :func:`launches` reads the notebook's
own code cells for ``launch("demo", N, ...)`` calls, and :func:`helpers.run.env.placement` -- the
launcher's one rule -- decides for each GPU count:

* ``N <= GPUs``: every rank on its own GPU with NCCL;
* ``N > GPUs``: every rank on the CPU with gloo, CUDA hidden from the ranks.

Cells that run a Colossal-AI feature only where CUDA is (ZeRO, Gemini, HybridAdam, the recorded
GPU benchmarks) are named by the notebook in ``gpu_only``: they run live with enough GPUs and show
the recorded GPU result otherwise.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers.run.env import rule
from helpers.record.results import format_table

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
GPU_COUNTS = (0, 1, 2, 8)
_LAUNCH = re.compile(r"""\blaunch\(\s*["'](?P<demo>[\w.]+)["']\s*,\s*(?:nproc\s*=\s*)?(?P<n>\d+)""")
_ANY_LAUNCH = re.compile(r"\blaunch\(\s*[\"']")


def notebook_path(name: str) -> Path:
    """``notebooks/<name>.ipynb`` for a name like ``"01_dimensions"``."""
    path = NOTEBOOKS / f"{name.removesuffix('.ipynb')}.ipynb"
    if not path.exists():
        known = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
        raise FileNotFoundError(f"no notebook {path.name}; the notebooks are {known}")
    return path


def _code(name: str) -> str:
    cells = json.loads(notebook_path(name).read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def launches(name: str) -> list[tuple[str, int]]:
    """Every distinct ``(demo, ranks)`` the notebook's cells pass to ``launch``, in order.

    A ``launch("demo", ...)`` whose rank count is not a literal number is an error: the table
    could not say where it runs.
    """
    code = _code(name)
    found = [(m["demo"], int(m["n"])) for m in _LAUNCH.finditer(code)]
    unparsed = len(_ANY_LAUNCH.findall(code)) - len(found)
    if unparsed:
        raise ValueError(f"{name}: {unparsed} launch(...) call(s) without a literal rank count")
    return list(dict.fromkeys(found))


def _where(ranks: int, gpus: int) -> str:
    return "GPU, NCCL" if rule(ranks, gpus) == "gpu" else "CPU, gloo"


def rows(
    name: str,
    gpu_only: dict[str, int] | None = None,
    also: dict[str, int] | None = None,
    cpu_only: dict[str, int] | None = None,
) -> list[dict]:
    """One row per run: its ranks and where it runs for each of :data:`GPU_COUNTS`.

    ``also``: runs a helper launches for the notebook (the rule applies to them too);
    ``cpu_only``: runs the launcher keeps on the CPU on purpose (Chapter 8's failure labs);
    ``gpu_only``: Colossal-AI cells that run live only with enough GPUs.
    """
    table = []
    for demo, ranks in [*launches(name), *(also or {}).items()]:
        table.append(
            {"run": demo, "ranks": ranks, **{_label(g): _where(ranks, g) for g in GPU_COUNTS}}
        )
    for what, ranks in (cpu_only or {}).items():
        table.append({"run": what, "ranks": ranks, **{_label(g): "CPU, gloo" for g in GPU_COUNTS}})
    for what, ranks in (gpu_only or {}).items():
        table.append(
            {
                "run": what,
                "ranks": ranks,
                **{_label(g): "live, GPU" if ranks <= g else "recorded" for g in GPU_COUNTS},
            }
        )
    return table


def _label(gpus: int) -> str:
    return f"{gpus} GPU" + ("" if gpus == 1 else "s")


def show(
    name: str,
    gpu_only: dict[str, int] | None = None,
    also: dict[str, int] | None = None,
    cpu_only: dict[str, int] | None = None,
) -> None:
    """Print :func:`rows` for notebook ``name`` (the same text on every machine)."""
    table = rows(name, gpu_only, also, cpu_only)
    if not table:
        print("This notebook launches no multi-process run: everything runs in this kernel.")
        return
    print("Where this notebook's runs happen. The launcher's rule: ranks <= GPUs -> one GPU each")
    print("with NCCL, else every rank on the CPU with gloo.")
    print(format_table(table, ["run", "ranks", *map(_label, GPU_COUNTS)]))
