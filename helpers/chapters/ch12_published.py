"""Chapter 12's published trainings: every figure read from its source, kept with its sentence.

Used by ``notebooks/12_in_practice.ipynb``, :mod:`helpers.chapters.ch12_predict` and
``tests/test_ch12_published.py``. Nothing here is typed from memory: :data:`RUNS` is loaded from
``helpers/data/published_trainings.yaml``, where each figure (a layout degree, the batch and
micro-batch, the sequence, the sharding, the schedule and its chunks, recomputation, precision, a
reported throughput or memory, and the architecture's numbers) is a mapping of ``value``,
``status``, ``source`` and ``quote``:

* **published**: a source states it; ``quote`` is the sentence, table row or command-line
  fragment, verbatim;
* **derived**: arithmetic on published figures; ``quote`` is the arithmetic, ``what: EXPR =
  VALUE``, which :func:`arithmetic` evaluates;
* **assumed**: nothing states it; ``quote`` says why and what the chapter takes. Only these are
  in :attr:`Run.assumed`.

The sources (each run's ``source`` is a key of :data:`SOURCES`):

* MEG: Narayanan et al. 2021 (SC '21, arXiv 2104.04473), Table 1, §5 and §5.1, and the authors'
  own script ``examples/sc21/run_table_1.sh`` in NVIDIA/Megatron-LM: micro-batches, full
  recomputation on every row, the interleaved schedule on the 76.1B, 145.6B, 310.1B and 529.6B
  rows (chunks v = layers / (P × layers per virtual stage)).
* L3: Dubey et al. 2024 (arXiv 2407.21783), Tables 3 and 4 and §3.3.2: no activation
  checkpointing on 8K sequences; FSDP that does not reshard after the forward; Table 4's 128K row
  as arXiv v3 prints it (DP 8).
* DSV3: DeepSeek-AI 2024 (arXiv 2412.19437), §1, §3.1-3.3 and §4.2, and the released
  ``inference/configs/config_671B.json``.
* BLOOM: BigScience's ``train/tr11-176B-ml/README.md`` and ``tr11-176B-ml.slurm``
  (bigscience-workshop/bigscience) and its training summary on bigscience.notion.site.
* OPT: Zhang et al. 2022 (arXiv 2205.01068), Table 1, §2.2 and §2.4, and metaseq's launcher
  (``metaseq/launcher/opt_baselines.py``, ``opt_job_constants.py``).
* ALPACA: the release post (crfm.stanford.edu/2023/03/13/alpaca.html: 8 A100 80 GB, 3 hours) and
  the repository's README (tatsu-lab/stanford_alpaca).

The architectures (:class:`helpers.models.shape.ModelShape`, :class:`helpers.cost.moe.MoEShape`)
are built here from the numbers in the same file, with their sources. BLOOM's shape is GPT's,
which counts a learned position table (29 M parameters) that BLOOM's ALiBi does not have.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path

import yaml

from helpers.models.shape import ModelShape
from helpers.cost.moe import MoEShape

DATA_FILE = Path(__file__).resolve().parent.parent / "data" / "published_trainings.yaml"
STATUSES = ("published", "derived", "assumed")


@dataclass(frozen=True)
class Run:
    """One published training (or one row of a published table), as its sources give it.

    Every field below ``model`` holds the value the chapter uses; ``figures`` says for each where
    it comes from (``value``, ``status``, ``source``, ``quote``), and ``assumed`` repeats the
    values no source states.
    """

    key: str
    training: str  # the family: "Megatron-LM Table 1", "Llama 3 405B", ...
    source: str  # a key of SOURCES
    model: object  # ModelShape or MoEShape: the published architecture
    cluster: str  # a preset of helpers.cost.hardware
    gpus: int
    tp: int | None
    pp: int | None
    dp: int | None
    global_batch: int | None  # sequences per step
    seq: int
    cp: int = 1
    ep: int = 1
    sharding: str = "none"  # how the data-parallel group shards: none (DDP), ZeRO-1, FSDP ...
    schedule: str = "-"
    precision: str = "bf16"
    micro_batch: int | None = None
    reported: dict = field(default_factory=dict)  # figure name -> value, as published
    counting: str = ""  # how the source counts its throughput
    assumed: dict = field(default_factory=dict)  # figure name -> value, where no source states it
    recompute: str = "full"  # "full" | "selective" | "none"
    chunks: int = 1  # interleaved virtual stages per pipeline rank
    zero_stage: int = 0  # 0 DDP, 1 optimizer states sharded, 2 + gradients, 3 + parameters
    reshard_after_forward: bool = True  # FSDP only: parameters freed after the forward
    figures: dict = field(default_factory=dict)  # name -> {value, status, source, quote[, note]}


# the figures that set a Run field of the same name
RUN_FIELDS = (
    "gpus",
    "tp",
    "pp",
    "dp",
    "global_batch",
    "seq",
    "cp",
    "ep",
    "sharding",
    "schedule",
    "precision",
    "micro_batch",
    "recompute",
    "chunks",
    "zero_stage",
    "reshard_after_forward",
)

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
}


def _evaluate(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError(f"not plain arithmetic: {ast.dump(node)}")


def arithmetic(quote: str) -> tuple[float, float]:
    """(computed, stated) of a derived figure's ``what: EXPR = VALUE``: EXPR evaluated (numbers,
    + - * / // and parentheses only) and the VALUE it claims."""
    expr, stated = quote.rsplit(": ", 1)[-1].rsplit(" = ", 1)
    return float(_evaluate(ast.parse(expr, mode="eval").body)), float(stated)


def _check(name: str, fig: dict, where: str) -> dict:
    """A figure as the file must give it: a known status, a source, and a quote."""
    if fig.get("status") not in STATUSES or "value" not in fig:
        raise ValueError(f"{where}: figure {name!r} needs a value and a status in {STATUSES}")
    if not str(fig.get("source", "")).strip() or not str(fig.get("quote", "")).strip():
        raise ValueError(f"{where}: figure {name!r} ({fig['status']}) needs a source and a quote")
    return fig


@lru_cache(maxsize=1)
def load() -> dict:
    """The data file, parsed with ``yaml.safe_load`` (sources and runs)."""
    return yaml.safe_load(DATA_FILE.read_text(encoding="utf-8"))


def _model(spec: dict) -> ModelShape | MoEShape:
    """The architecture from its published numbers: GPT-style, Llama-style, or DeepSeek-V3's MoE."""
    v = {name: fig["value"] for name, fig in spec["figures"].items()}
    name, shape = spec["name"], spec["shape"]
    if shape == "gpt":
        return ModelShape.gpt(
            v["layers"], v["hidden"], v["heads"], vocab=v["vocab"], seq_len=v["seq_len"], name=name
        )
    if shape == "llama":
        return ModelShape.llama(
            v["layers"],
            v["hidden"],
            v["heads"],
            v.get("kv_heads"),
            v["vocab"],
            v["ffn"],
            seq_len=v["seq_len"],
            name=name,
        )
    if shape == "moe":
        known = {f.name for f in fields(MoEShape)} - {"name"}
        return MoEShape(**{k: v[k] for k in known}, name=name)
    raise ValueError(f"unknown shape {shape!r}")


def _run(entry: dict) -> Run:
    key = entry["key"]
    figures = {n: _check(n, f, key) for n, f in entry["figures"].items()}
    reported = {n: _check(n, f, key) for n, f in entry["reported"].items()}
    model_figs = {f"model.{n}": _check(n, f, key) for n, f in entry["model"]["figures"].items()}
    every = figures | reported | model_figs
    layout = {n: f["value"] for n, f in figures.items() if n in RUN_FIELDS}
    layout.setdefault("tp", None)
    layout.setdefault("pp", None)
    layout.setdefault("dp", None)
    layout.setdefault("global_batch", None)
    return Run(
        key=key,
        training=entry["training"],
        source=entry["source"],
        model=_model(entry["model"]),
        cluster=entry["cluster"],
        reported={n: f["value"] for n, f in reported.items()},
        counting=entry["counting"],
        assumed={n: f["value"] for n, f in every.items() if f["status"] == "assumed"},
        figures=every,
        **layout,
    )


SOURCES: dict[str, str] = dict(load()["sources"])
RUNS: list[Run] = [_run(entry) for entry in load()["runs"]]

# Megatron-LM's Table 1 as printed: (params, heads, hidden, layers, t, p, GPUs, batch, TFLOP/s per
# GPU, % of peak, aggregate PFLOP/s), and what the authors' script sets for each row
MEGATRON_TABLE1 = [
    (
        r.key.removeprefix("MEG-"),
        r.model.heads,
        r.model.hidden,
        r.model.layers,
        r.tp,
        r.pp,
        r.gpus,
        r.global_batch,
        r.reported["TFLOP/s per GPU"],
        r.reported["% of peak"],
        r.reported["aggregate PFLOP/s"],
    )
    for r in RUNS
    if r.source == "MEG"
]
MEGATRON_SCRIPT = {e["key"]: e["script"] for e in load()["runs"] if "script" in e}


def by_key(key: str) -> Run:
    return next(r for r in RUNS if r.key == key)


LLAMA3 = [r for r in RUNS if r.source == "L3"]
LLAMA3_405B = LLAMA3[0].model
DEEPSEEK_V3 = by_key("DSV3")
BLOOM = by_key("BLOOM")
OPT = by_key("OPT")
ALPACA = by_key("ALPACA")


def figure(run: Run, name: str) -> dict:
    """The figure ``name`` of ``run``: its value, status, source and quote."""
    return run.figures[name]
