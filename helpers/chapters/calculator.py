"""The calculator page's files, written at every book build: the Python it runs and its presets.

``book/calculator.md`` runs :func:`helpers.cost.web.calculate` in the reader's browser with
Pyodide (``make venv`` fetches it into ``_offline/pyodide/``; ``_config.yml`` copies ``_offline``
into ``_static/``). This module is a Sphinx extension (``_config.yml``, ``extra_extensions``): after
each HTML build it writes into ``_static/calculator/``

* ``helpers.zip``: :mod:`helpers.cost.web` and every helpers module it imports at module level
  (:func:`modules`), byte for byte from the sources of this build, so the page runs the Python of
  the book it is part of;
* ``calculator.json``: the presets (:func:`presets`: the book's flagship of Chapter 8, Llama-2-7B,
  Llama-2-70B and Llama 3 405B, and the published trainings of Chapter 12 that the step model
  times without extra terms), the cluster presets and the zip's SHA-256 per file.

``tests/test_calculator.py`` checks both against the sources and runs the page in Chromium.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import zipfile
from pathlib import Path

from helpers.chapters.ch12_predict import fitted_eta, layout_of, timed_shape
from helpers.chapters.ch12_published import LLAMA3_405B, RUNS
from helpers.cost import web
from helpers.cost.hardware import PRESETS
from helpers.cost.planner import LLAMA2_70B
from helpers.models.shape import ModelShape
from helpers.record.flagship_runs import COMMON
from helpers.train.presets import PRESETS as TRAIN_PRESETS

ROOT = Path(__file__).resolve().parents[2]  # the repository: helpers/ and _offline/ are in it
ENTRY = "helpers.cost.web"
STATIC = ROOT / "book" / "_static" / "calculator"  # the page's script, style and boot.py
PYODIDE_FILES = (
    "pyodide.mjs",
    "pyodide.asm.mjs",
    "pyodide.asm.wasm",
    "python_stdlib.zip",
    "pyodide-lock.json",
)
# Touvron et al. 2023, "Llama 2", Table 1 (7B, 4k context) and the released config of
# meta-llama/Llama-2-7b-hf (hidden 4096, intermediate 11008, 32 layers and heads, vocab 32000)
LLAMA2_7B = ModelShape.llama(32, 4096, 32, 32, 32000, 11008, seq_len=4096, name="Llama-2-7B")
# Chapter 8's flagship: helpers.train.presets' "1b" Llama at the run list's sequence length
FLAGSHIP = ModelShape.llama(
    **{k: TRAIN_PRESETS["1b"][k] for k in ("layers", "hidden", "heads", "vocab")},
    seq_len=int(COMMON[COMMON.index("--seq") + 1]),
    name="Chapter 8's flagship",
)
DEFAULT = "llama-2-7b"


def _file(module: str) -> Path:
    base = ROOT.joinpath(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def modules(entry: str = ENTRY) -> list[str]:
    """``entry`` and every helpers module it imports at module level, their packages included
    (an import inside a function runs only when called: the calculator calls none of them)."""
    seen, todo = set(), [entry]
    while todo:
        name = todo.pop()  # a module, a package, or a name imported from one (not a file)
        if name in seen or not _file(name).is_file():
            continue
        seen.add(name)
        todo += [name.rpartition(".")[0]] if "." in name else []
        todo += [m for node in ast.parse(_file(name).read_text()).body for m in _imports(node)]
    return sorted(seen)


def _imports(node) -> list[str]:
    """helpers modules a module-level statement imports (into if/try blocks, not functions)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.startswith("helpers")]
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers"):
        return [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    if isinstance(node, (ast.If, ast.Try)):
        inner = node.body + node.orelse + getattr(node, "finalbody", [])
        inner += [s for h in getattr(node, "handlers", []) for s in h.body]
        return [m for s in inner for m in _imports(s)]
    return []


def sources() -> dict[str, bytes]:
    """Path in the zip (``helpers/cost/web.py``) -> the source file's bytes."""
    return {_file(m).relative_to(ROOT).as_posix(): _file(m).read_bytes() for m in modules()}


def zip_bytes(files: dict[str, bytes] | None = None) -> bytes:
    """A zip of ``files`` (default :func:`sources`) that depends on their bytes only."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in sorted((sources() if files is None else files).items()):
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            z.writestr(info, data, zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def _model(shape: ModelShape) -> dict:
    return {
        "style": "gpt" if shape.mlp == "gelu" else "llama",
        "name": shape.name,
        "layers": shape.layers,
        "hidden": shape.hidden,
        "heads": shape.heads,
        "kv_heads": shape.kv,
        "ffn": shape.ffn,
        "vocab": shape.vocab,
        "seq": shape.seq_len,
    }


def presets() -> list[dict]:
    """The page's presets: four models (the rest of the settings stay as they are), then each
    published training of Chapter 12 with a dense model and no context parallelism, its layout
    as Chapter 12 times it (layers rounded up to a multiple of P) on its cluster, at the
    compute efficiency Chapter 12 fits (rounded to 3 digits)."""
    models = {
        "flagship": FLAGSHIP,
        "llama-2-7b": LLAMA2_7B,
        "llama-2-70b": LLAMA2_70B,
        "llama-3-405b": LLAMA3_405B,
    }
    out = [
        {"key": k, "label": f"{m.name} ({m.params / 1e9:.2f} B)", "settings": _model(m)}
        for k, m in models.items()
    ]
    for run in RUNS:
        if not isinstance(run.model, ModelShape) or run.cp > 1:
            continue
        layout, hw = layout_of(run), PRESETS[run.cluster]
        settings = _model(timed_shape(run)) | {
            "hw": run.cluster,
            "G": run.gpus,
            "node": hw.gpus_per_node,
            "mem": hw.memory_gib,
            "eff": round(fitted_eta(), 3),
            "T": layout.tp,
            "P": layout.pp,
            "S": 1,
            "sp": "none",
            "v": layout.chunks,
            "zero": layout.zero_stage,
            "fsdp": "reshard" if layout.reshard_after_forward else "keep",
            "b": layout.microbatch,
            "B": run.global_batch,
            "rc": run.recompute,
        }
        label = f"{run.key}: {run.model.name}, {run.gpus} GPUs (Chapter 12)"
        out.append({"key": run.key, "label": label, "settings": settings, "training": True})
    return out


def page_data(zipped: bytes | None = None) -> dict:
    """``calculator.json``: presets, the default one, the cluster presets, the zip's hashes."""
    files = sources()
    zipped = zip_bytes(files) if zipped is None else zipped
    return {
        "presets": presets(),
        "default": DEFAULT,
        "defaults": web.DEFAULTS | {"G": 8},
        "hardware": web.hardware_presets(),
        "zip": {
            "sha256": hashlib.sha256(zipped).hexdigest(),
            "files": {p: hashlib.sha256(b).hexdigest() for p, b in sorted(files.items())},
        },
    }


def _check_pyodide(app) -> None:
    missing = [f for f in PYODIDE_FILES if not (ROOT / "_offline" / "pyodide" / f).is_file()]
    if missing and app.builder.format == "html":
        from sphinx.util import logging  # Sphinx: only inside a build

        logging.getLogger(__name__).warning(
            "the calculator page needs Pyodide in _offline/pyodide/ (missing: %s): run `make venv`"
            " (it fetches it with npm pack)",
            ", ".join(missing),
        )


def _write(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir) / "_static" / "calculator"
    out.mkdir(parents=True, exist_ok=True)
    for page_file in STATIC.iterdir():  # Sphinx copies _static only when a page was rewritten
        (out / page_file.name).write_bytes(page_file.read_bytes())
    zipped = zip_bytes()
    (out / "helpers.zip").write_bytes(zipped)
    (out / "calculator.json").write_text(json.dumps(page_data(zipped), indent=1) + "\n")


def setup(app) -> dict:
    """The Sphinx extension: warn without Pyodide, write the page's files after the build."""
    app.connect("builder-inited", _check_pyodide)
    app.connect("build-finished", _write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
