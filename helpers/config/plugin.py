"""From a validated :class:`~helpers.config.schema.TrainConfig` to what runs: the Colossal-AI plugin and
its keyword arguments, and the scaled-down configuration for a dry run.

Used by Chapter 4 (the mapping table, the dry-run planner) and Chapter 5's training entry point
(``build_plugin``, ``scaled_down``). Only keyword arguments that the Colossal-AI 0.5.0
constructors accept are emitted (tests bind every generated dict to ``inspect.signature``).

Which plugin (Colossal-AI 0.5.0, ``colossalai/booster/plugin/``):

* ZeRO-3 → ``GeminiPlugin`` (chunk-based parameter sharding; fp16/bf16 only);
* only data parallelism (tensor = pipeline = 1, no sequence split):
  ZeRO-1/2 → ``LowLevelZeroPlugin(stage=…)``; ZeRO-0 fp32/fp16 → ``TorchDDPPlugin`` (fp16 through
  ``Booster(mixed_precision="fp16")``, torch AMP); ZeRO-0 bf16 → ``HybridParallelPlugin(tp_size=1,
  pp_size=1, precision="bf16")``, because ``Booster(mixed_precision="bf16")`` fails in 0.5.0
  (``BF16MixedPrecision`` is abstract: "Can't instantiate abstract class");
* anything with tensor, pipeline or sequence parallelism → ``HybridParallelPlugin``.
"""

from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass, field

from helpers.config.schema import TrainConfig, load_config

PLUGINS = ("TorchDDPPlugin", "LowLevelZeroPlugin", "GeminiPlugin", "HybridParallelPlugin")


@dataclass(frozen=True)
class PluginSpec:
    """A plugin class name, its constructor kwargs, the Booster's kwargs and why it was chosen."""

    plugin: str
    kwargs: dict
    booster_kwargs: dict = field(default_factory=dict)
    why: str = ""
    notes: tuple[str, ...] = ()

    def call(self) -> str:
        """The constructor call as Python source, e.g. ``HybridParallelPlugin(tp_size=2, pp_size=1)``."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.plugin}({args})"


def plugin_class(name: str):
    """The Colossal-AI plugin class called ``name`` (imports Colossal-AI)."""
    if name not in PLUGINS:
        raise ValueError(f"unknown plugin {name!r}; one of {PLUGINS}")
    with warnings.catch_warnings():  # optional-kernel notices (apex, tensornvme) on import
        warnings.simplefilter("ignore")
        from colossalai.booster import plugin as plugins

    return getattr(plugins, name)


def plugin_spec(cfg: TrainConfig) -> PluginSpec:
    """The plugin for ``cfg`` and the kwargs it is constructed with (see the module docstring)."""
    p, t = cfg.parallelism, cfg.train
    clip = {"max_norm": t.max_grad_norm} if t.max_grad_norm else {}
    if p.zero_stage == 3:
        kwargs = {
            "precision": t.precision,
            **({"tp_size": p.tensor} if p.tensor > 1 else {}),
            **clip,
        }
        return PluginSpec(
            "GeminiPlugin",
            kwargs,
            why="zero_stage 3: Gemini shards parameters, gradients and optimizer states in chunks",
        )
    if p.model_parallel == 1 and p.zero_stage in (1, 2):
        return PluginSpec(
            "LowLevelZeroPlugin",
            {"stage": p.zero_stage, "precision": t.precision, **clip},
            why=f"data parallelism only, ZeRO-{p.zero_stage}",
        )
    if p.model_parallel == 1 and t.precision != "bf16":
        notes = (
            (
                "max_grad_norm: TorchDDPPlugin does not clip; call optimizer.clip_grad_by_norm("
                f"{t.max_grad_norm}) before optimizer.step()",
            )
            if t.max_grad_norm
            else ()
        )
        booster = {"mixed_precision": "fp16"} if t.precision == "fp16" else {}
        return PluginSpec(
            "TorchDDPPlugin",
            {},
            booster,
            why="data parallelism only, no ZeRO: PyTorch DDP"
            + (", fp16 through torch AMP" if booster else ""),
            notes=notes,
        )
    kwargs: dict = {
        "tp_size": p.tensor,
        "pp_size": p.pipeline,
        "precision": t.precision,
        "zero_stage": p.zero_stage,
    }
    if p.sequence_mode:
        kwargs.update(enable_sequence_parallelism=True, sequence_parallelism_mode=p.sequence_mode)
        if p.sp_in_world > 1:
            kwargs["sp_size"] = p.sequence
    if p.pipeline > 1:
        if p.microbatches:
            kwargs["num_microbatches"] = p.microbatches
        else:
            kwargs["microbatch_size"] = t.micro_batch_size
    kwargs.update(clip)
    notes = (
        ("ring_attn turns on flash attention: it needs the flash-attn package and GPUs",)
        if p.sequence_mode == "ring_attn"
        else ()
    )
    why = (
        (
            "bf16 without ZeRO: Booster(mixed_precision='bf16') fails in Colossal-AI 0.5.0, the hybrid "
            "plugin with tp = pp = 1 runs DDP in bf16"
        )
        if p.model_parallel == 1
        else "tensor, pipeline or sequence parallelism: shardformer + the hybrid mesh (dp, pp, tp, sp)"
    )
    return PluginSpec("HybridParallelPlugin", kwargs, why=why, notes=notes)


def check_signature(spec: PluginSpec) -> None:
    """Raise TypeError if the plugin's constructor does not accept ``spec.kwargs``."""
    inspect.signature(plugin_class(spec.plugin)).bind(**spec.kwargs)


def build_plugin(cfg: TrainConfig):
    """(plugin, booster) for ``cfg``; call inside an initialised process group (torchrun).

    Keep a reference to the plugin while training: its ``__del__`` destroys its process groups.
    """
    from colossalai.booster import Booster

    spec = plugin_spec(cfg)
    plugin = plugin_class(spec.plugin)(**spec.kwargs)
    return plugin, Booster(plugin=plugin, **spec.booster_kwargs)


# The table Chapter 4 shows: which config field becomes which constructor argument.
# Every name in a cell that is followed by '=' is checked against the constructor in the tests.
MAPPING = [
    ("parallelism.data", "world ÷ 1", "world ÷ 1", "world ÷ tp_size", "world ÷ (tp·pp·sp)"),
    ("parallelism.tensor", "must be 1", "must be 1", "tp_size=", "tp_size="),
    ("parallelism.pipeline", "must be 1", "must be 1", "must be 1", "pp_size="),
    (
        "parallelism.sequence",
        "must be 1",
        "must be 1",
        "must be 1",
        "sp_size= (all_to_all, ring_attn)",
    ),
    (
        "parallelism.sequence_mode",
        "—",
        "—",
        "—",
        "enable_sequence_parallelism=, sequence_parallelism_mode=",
    ),
    ("parallelism.zero_stage", "0", "stage= (1, 2)", "3 (always)", "zero_stage= (0, 1, 2)"),
    ("parallelism.microbatches", "—", "—", "—", "num_microbatches="),
    (
        "train.micro_batch_size",
        "loader batch",
        "loader batch",
        "loader batch",
        "microbatch_size= (if no microbatches)",
    ),
    (
        "train.precision",
        "Booster(mixed_precision=) fp16",
        "precision=",
        "precision= (fp16, bf16)",
        "precision=",
    ),
    ("train.max_grad_norm", "clip in the loop", "max_norm=", "max_norm=", "max_norm="),
    (
        "train.batch_size",
        "÷ data = loader batch",
        "÷ data",
        "÷ data",
        "÷ data = microbatches × micro-batch",
    ),
    ("train.learning_rate, seed", "optimizer, torch.manual_seed", "same", "same", "same"),
    (
        "train.save_interval, checkpoint_dir",
        "booster.save_model / save_optimizer",
        "same",
        "same",
        "same",
    ),
    ("model.*", "LlamaConfig (helpers.models.llama)", "same", "same", "same"),
]


def mapping_rows() -> list[dict]:
    """MAPPING as rows for :func:`helpers.record.results.format_table`."""
    return [dict(zip(("config", *PLUGINS), row)) for row in MAPPING]


# -- validate small, then scale ------------------------------------------------------------------
_SHRINK_ORDER = ("data", "sequence", "pipeline", "tensor")  # dropped first → last


def _smaller(d: int) -> int:
    """The next smaller degree: the largest proper divisor (8 → 4, 6 → 3, 3 → 1)."""
    return max(k for k in range(1, d) if d % k == 0)


def scaled_down(cfg: TrainConfig, max_procs: int, steps: int = 1) -> TrainConfig:
    """The source guide's "validate small, then scale": ``cfg`` with every degree made smaller
    until the layout fits ``max_procs`` processes, and a tiny model of the same kind.

    Degrees first shrink one size at a time (largest degree first, to a divisor of the original,
    so every divisibility rule still holds) while they stay above 1; only when that is not enough
    are dimensions switched off, data first and tensor last, so the dry run exercises as many of
    the original dimensions as ``max_procs`` allows. The model keeps its kind and its attention
    type (grouped-query or not) at a size a CPU runs in seconds; the batch is the smallest that
    feeds every stage; the run is ``steps`` steps and saves a checkpoint after each one.
    """
    if max_procs < 1:
        raise ValueError(f"max_procs must be at least 1, got {max_procs}")
    p, t, m = cfg.parallelism, cfg.train, cfg.model
    mode = p.sequence_mode
    deg = {
        "data": p.data if isinstance(p.data, int) else max_procs,
        "tensor": p.tensor,
        "pipeline": p.pipeline,
        "sequence": p.sp_in_world,
    }
    size = lambda: math.prod(deg.values())  # noqa: E731
    while size() > max_procs and max(deg.values()) > 2:
        name = max(_SHRINK_ORDER, key=lambda k: deg[k])  # ties: the earlier in _SHRINK_ORDER
        deg[name] = _smaller(deg[name])
    for name in _SHRINK_ORDER:
        while size() > max_procs and deg[name] > 1:
            deg[name] = _smaller(deg[name])
    tp, pp, sp = deg["tensor"], deg["pipeline"], deg["sequence"]
    if (
        mode in ("split_gather", "ring")
        and tp == 1
        or mode in ("all_to_all", "ring_attn")
        and sp == 1
    ):
        mode = None
    group = 2 if m.kv < m.heads else 1  # keep grouped-query attention if the model had it
    unit = tp * (sp if mode in ("all_to_all", "ring_attn") else 1)
    kv = max(2, unit) if group > 1 else None
    heads = kv * group if kv else max(4, unit)
    split = {"all_to_all": sp, "ring_attn": 2 * sp, "split_gather": tp, "ring": tp}.get(
        mode or "", 1
    )
    micro = 2 * pp if pp > 1 else None
    return load_config(
        {
            "parallelism": {
                "data": deg["data"],
                "tensor": tp,
                "pipeline": pp,
                "sequence": sp if mode in ("all_to_all", "ring_attn") else 1,
                "sequence_mode": mode,
                "zero_stage": p.zero_stage,
                "microbatches": micro,
            },
            "train": {
                **t.model_dump(),
                "batch_size": deg["data"] * 2 * (micro or 1),
                "micro_batch_size": 2,
                "steps": steps,
                "save_interval": 1,
                "checkpoint_dir": f"{t.checkpoint_dir}-dry-run",
            },
            "model": {
                "kind": m.kind,
                "layers": 2 * pp,
                "hidden": 16 * heads,
                "heads": heads,
                "kv_heads": kv,
                "vocab": 128,
                "seq_len": split * math.ceil(32 / split),
            },
        }
    )


def side_by_side(full: TrainConfig, small: TrainConfig, procs: int | None = None) -> list[dict]:
    """Rows 'field | full | dry run' for every field that differs, plus world size and plugin."""
    a, b = _flat(full.to_dict()), _flat(small.to_dict())
    rows = [{"field": k, "full": a[k], "dry run": b[k]} for k in a if a[k] != b[k]]
    world = full.world_size(procs) if full.data_degree or procs else "auto"
    rows.append({"field": "world size", "full": world, "dry run": small.world_size()})
    rows.append(
        {"field": "plugin", "full": plugin_spec(full).plugin, "dry run": plugin_spec(small).plugin}
    )
    return rows


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def markdown_table(rows: list[dict], columns: list[str]) -> str:
    """A Markdown table (for a page or a README)."""
    esc = lambda v: str(v).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(
        lines + ["| " + " | ".join(esc(r.get(c, "")) for c in columns) + " |" for r in rows]
    )


def html_table(rows: list[dict], columns: list[str]) -> str:
    """An HTML table: what the notebook displays and the chapter page pastes (myst-nb glue)."""
    from html import escape

    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(r.get(c, '')))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f'<table class="table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def show_table(rows: list[dict], columns: list[str], key: str) -> None:
    """Display a table in the notebook and glue it as ``key`` for the chapter page (like plots.show)."""
    from IPython.display import HTML, display

    table = HTML(html_table(rows, columns))
    try:
        from myst_nb import glue
    except ImportError:  # a GPU box with only the notebook tools
        display(table)
    else:
        glue(key, table, display=True)
