"""Training configuration files: YAML or a dict → a validated :class:`TrainConfig`.

Used by Chapter 4 (configuration files) and by Chapter 5's training entry point. The shape is
the source guide's (``parallelism: {data, tensor, pipeline}`` and ``train: {batch_size,
learning_rate, precision, save_interval}``) plus what a real run needs: the sequence degree and
mode, the ZeRO stage, micro-batches, the model, the checkpoint folder and the seed.

Every bad configuration is rejected *before* any process starts, with one :class:`ConfigError`
whose message names the field, the value and how to fix it. The rules mirror the checks that
Colossal-AI 0.5.0's plugins run only after ``torchrun`` has started every rank (asserts in
``HybridParallelPlugin.__init__``, ``LowLevelZeroPlugin.__init__``, ``GeminiPlugin.__init__``)
and the divisibility rules of the model shapes (heads over tp, layers over pp, batch over dp).

Related modules: :mod:`helpers.config.plugin` (config → plugin kwargs, dry-run planner) and
:mod:`helpers.config.legacy` (legacy ``config.py`` → this format).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    model_validator,
)

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
SEQUENCE_MODES = ("split_gather", "ring", "all_to_all", "ring_attn")
SHARES_TP = ("split_gather", "ring")  # these modes split the sequence over the tensor group
PRECISIONS = ("fp32", "fp16", "bf16")


class ConfigError(ValueError):
    """A configuration is invalid: one message naming the field, the value and a fix."""

    def __init__(self, message: str, field: str | None = None, value: Any = None):
        super().__init__(message)
        self.field, self.value = field, value


def _fail(field: str, value: Any, problem: str, fix: str) -> ConfigError:
    shown = value if isinstance(value, str) and value.startswith("(") else repr(value)
    return ConfigError(f"{field} = {shown}: {problem}; {fix}", field, value)


def _data_degree(v: Any) -> Any:
    if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        return v
    fix = (
        f"write the digits, data: {v}"
        if isinstance(v, str) and v.isdigit()
        else "use a whole number ≥ 1, or 'auto' to take what tensor × pipeline × sequence leave"
    )
    raise _fail("parallelism.data", v, "not a data-parallel degree", fix)


def _not_bool(v: Any) -> Any:
    if isinstance(v, bool):  # YAML 'yes'/'true' would otherwise pass as 1 / 1.0
        raise ValueError("bool")
    return v


Degree = Annotated[int, Strict(), Field(ge=1)]
Count = Annotated[int, Strict(), Field(ge=0)]
Number = Annotated[float, BeforeValidator(_not_bool)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Parallelism(Section):
    data: Annotated[int | str, BeforeValidator(_data_degree)] = "auto"  # whole number ≥ 1 or "auto"
    tensor: Degree = 1
    pipeline: Degree = 1
    sequence: Degree = 1
    sequence_mode: Literal["split_gather", "ring", "all_to_all", "ring_attn"] | None = None
    zero_stage: Annotated[int, Strict(), Field(ge=0, le=3)] = 0
    microbatches: Degree | None = None

    @property
    def sp_in_world(self) -> int:
        """How many processes the sequence axis adds: split_gather/ring reuse the tensor group."""
        return self.sequence if self.sequence_mode in ("all_to_all", "ring_attn") else 1

    @property
    def model_parallel(self) -> int:
        """Processes one data-parallel replica spans: tensor × pipeline × (sequence)."""
        return self.tensor * self.pipeline * self.sp_in_world


class Train(Section):
    batch_size: Degree
    learning_rate: Annotated[Number, Field(gt=0)]
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    save_interval: Count = 0  # steps between checkpoints; 0 = never
    keep_last: Degree | None = None  # newest checkpoints kept on disk; None = all
    micro_batch_size: Degree | None = None  # sequences per forward pass on one data-parallel rank
    steps: Degree = 100
    seed: Count = 42
    checkpoint_dir: Annotated[str, Strict(), Field(min_length=1)] = "ckpt"  # /ckpt*/ is git-ignored
    max_grad_norm: Annotated[Number, Field(ge=0)] = 0.0  # 0 = no clipping


class Model(Section):
    kind: Literal["tiny-llama", "llama"] = "tiny-llama"  # Llama architecture, random init
    layers: Degree = 4
    hidden: Degree = 256
    heads: Degree = 8
    kv_heads: Degree | None = None  # None: as many as heads (no GQA)
    vocab: Degree = 512
    seq_len: Degree = 256

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads


class TrainConfig(Section):
    """The whole configuration; build it with :func:`load_config` to get clear errors."""

    parallelism: Parallelism = Parallelism()
    train: Train
    model: Model = Model()

    @model_validator(mode="after")
    def _consistent(self) -> "TrainConfig":
        check(self)
        return self

    # -- derived quantities -------------------------------------------------------------
    @property
    def data_degree(self) -> int | None:
        """The data-parallel degree, or None while it is 'auto' and no world size is known."""
        d = self.parallelism.data
        return None if d == "auto" else d

    def world_size(self, procs: int | None = None) -> int:
        """Processes this layout needs (data × tensor × pipeline × sequence for all_to_all/ring_attn)."""
        if self.data_degree is None:
            if procs is None:
                raise ConfigError(
                    "parallelism.data = 'auto': the world size follows from the number of "
                    "processes; call world_size(procs) or resolve(procs), or set data",
                    "parallelism.data",
                    "auto",
                )
            return self.resolve(procs).world_size()
        return self.data_degree * self.parallelism.model_parallel

    def resolve(self, procs: int) -> "TrainConfig":
        """The same config with ``data`` fixed for ``procs`` processes (checked against them)."""
        check_world(self, procs)
        data = procs // self.parallelism.model_parallel
        return self.with_changes({"parallelism": {"data": data}})

    @property
    def per_rank_batch(self) -> int:
        """Sequences one data-parallel rank trains on per optimizer step."""
        return self.train.batch_size // self._need_data()

    @property
    def micro_batch(self) -> int:
        """Sequences per forward pass on one data-parallel rank."""
        t, p = self.train, self.parallelism
        if t.micro_batch_size:
            return t.micro_batch_size
        return self.per_rank_batch // (p.microbatches or 1)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per step: the pipeline schedule's, or gradient-accumulation steps at pp=1."""
        return self.per_rank_batch // self.micro_batch

    def _need_data(self) -> int:
        if self.data_degree is None:
            raise ConfigError(
                "parallelism.data = 'auto': resolve(procs) first to know the per-rank batch",
                "parallelism.data",
                "auto",
            )
        return self.data_degree

    def to_dict(self) -> dict:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def with_changes(self, changes: dict) -> "TrainConfig":
        """A new validated config with ``changes`` merged section by section."""
        raw = self.to_dict()
        for section, values in changes.items():
            raw[section] = {**raw.get(section, {}), **values}
        return load_config(raw)


# -- cross-field rules ---------------------------------------------------------------------
def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _nearest(options: list[int], target: int, k: int = 2) -> str:
    best = sorted((o for o in options if o != target), key=lambda o: (abs(o - target), o))[:k]
    return " or ".join(str(o) for o in sorted(best)) or "1"


def check(cfg: TrainConfig) -> None:
    """Cross-field rules; raises the first ConfigError found (most fundamental first)."""
    p, t, m = cfg.parallelism, cfg.train, cfg.model
    mode = p.sequence_mode
    if p.sequence > 1 and mode is None:
        raise _fail(
            "parallelism.sequence",
            p.sequence,
            "a sequence degree needs a sequence_mode",
            "add sequence_mode: all_to_all (Ulysses; or ring_attn), or split_gather/ring with tensor > 1",
        )
    if mode in SHARES_TP and p.tensor == 1:
        raise _fail(
            "parallelism.sequence_mode",
            mode,
            f"{mode} splits the sequence over the tensor-parallel group, and tensor = 1",
            "set tensor: 2 or more, or use sequence_mode: all_to_all with sequence: 2",
        )
    if mode in SHARES_TP and p.sequence not in (1, p.tensor):
        raise _fail(
            "parallelism.sequence",
            p.sequence,
            f"{mode} reuses the tensor group, so its degree is tensor = {p.tensor}",
            f"remove sequence (or set it to {p.tensor}), or use all_to_all",
        )
    if mode in ("all_to_all", "ring_attn") and p.sequence == 1:
        raise _fail(
            "parallelism.sequence",
            1,
            f"sequence_mode {mode} with sequence 1 splits nothing",
            "set sequence: 2 or more, or remove sequence_mode",
        )
    if p.pipeline > 1 and p.microbatches is None and t.micro_batch_size is None:
        raise _fail(
            "parallelism.microbatches",
            "(not set)",
            f"pipeline = {p.pipeline} needs micro-batches to keep its stages busy",
            f"add microbatches: {2 * p.pipeline} (≥ pipeline; more shrinks the bubble)",
        )
    if p.microbatches is not None and p.pipeline == 1:
        raise _fail(
            "parallelism.microbatches",
            p.microbatches,
            "micro-batches feed the pipeline schedule and pipeline = 1",
            "remove microbatches (for gradient accumulation set train.micro_batch_size)",
        )
    if p.zero_stage == 3 and p.pipeline > 1:
        raise _fail(
            "parallelism.zero_stage",
            3,
            f"ZeRO-3 (GeminiPlugin) cannot run with pipeline = {p.pipeline}",
            "use zero_stage: 1 with the pipeline, or pipeline: 1 with ZeRO-3",
        )
    if p.zero_stage == 2 and p.pipeline > 1:
        raise _fail(
            "parallelism.zero_stage",
            2,
            "HybridParallelPlugin allows only ZeRO 0 or 1 with a pipeline "
            "(gradient sharding would sync every micro-batch)",
            "use zero_stage: 1",
        )
    if p.zero_stage == 3 and mode is not None:
        raise _fail(
            "parallelism.zero_stage",
            3,
            f"ZeRO-3 (GeminiPlugin) has no {mode} sequence parallelism",
            "use zero_stage: 1 or 2 (HybridParallelPlugin) with sequence parallelism",
        )
    if p.zero_stage == 3 and t.precision == "fp32":
        raise _fail(
            "train.precision",
            "fp32",
            "ZeRO-3 (GeminiPlugin) trains in fp16 or bf16 only",
            "set precision: bf16 (or fp16), or zero_stage: 1/2",
        )
    if p.zero_stage in (1, 2) and t.precision == "fp32" and p.model_parallel > 1:
        raise _fail(
            "train.precision",
            "fp32",
            "HybridParallelPlugin's ZeRO optimizer needs a 16-bit precision",
            "set precision: bf16 (or fp16), or zero_stage: 0",
        )
    _check_model(p, m)
    if cfg.data_degree is not None:
        _check_batch(p, t, cfg.data_degree)


def _check_model(p: Parallelism, m: Model) -> None:
    if m.hidden % m.heads:
        raise _fail(
            "model.hidden",
            m.hidden,
            f"does not split into heads = {m.heads}",
            f"use a multiple of {m.heads}, e.g. {m.heads * max(1, round(m.hidden / m.heads))}",
        )
    if m.kv_heads is not None and m.heads % m.kv_heads:
        raise _fail(
            "model.kv_heads",
            m.kv_heads,
            f"grouped-query attention needs kv_heads to divide heads = {m.heads}",
            f"try kv_heads {_nearest(_divisors(m.heads), m.kv_heads)}",
        )
    for name, n in (("heads", m.heads), ("kv_heads", m.kv)):
        if n % p.tensor:
            ok = [d for d in _divisors(m.heads) if m.kv % d == 0]
            raise _fail(
                "parallelism.tensor",
                p.tensor,
                f"does not divide model.{name} = {n} (each tensor rank holds whole heads)",
                f"try tensor {_nearest(ok, p.tensor)}",
            )
    for name, n in (("heads", m.heads), ("kv_heads", m.kv)):
        if p.sequence_mode == "all_to_all" and n % (
            p.tensor * p.sequence
        ):  # shardformer: n // sp // tp, unchecked
            ok = [d for d in _divisors(m.heads // p.tensor) if (m.kv // p.tensor) % d == 0]
            raise _fail(
                "parallelism.sequence",
                p.sequence,
                f"all_to_all gives each rank model.{name} / (tensor × "
                f"sequence) = {n} / {p.tensor * p.sequence} heads, not whole",
                f"try sequence {_nearest(ok, p.sequence)}",
            )
    if m.layers % p.pipeline:
        raise _fail(
            "parallelism.pipeline",
            p.pipeline,
            f"does not divide model.layers = {m.layers} into equal stages "
            "(the pipeline would run at the pace of its largest stage)",
            f"try pipeline {_nearest(_divisors(m.layers), p.pipeline)}",
        )
    split = {"all_to_all": p.sequence, "ring_attn": 2 * p.sequence}.get(p.sequence_mode or "", 1)
    if p.sequence_mode in SHARES_TP:
        split = p.tensor
    if m.seq_len % split:
        why = (
            "ring_attn's zigzag split needs 2 × sequence chunks"
            if p.sequence_mode == "ring_attn"
            else f"{p.sequence_mode} gives each rank seq_len / {split} tokens"
        )
        raise _fail(
            "model.seq_len",
            m.seq_len,
            f"does not divide by {split} ({why})",
            f"use a multiple of {split}, e.g. {split * max(1, round(m.seq_len / split))}",
        )


def _check_batch(p: Parallelism, t: Train, data: int) -> None:
    if t.batch_size % data:
        raise _fail(
            "train.batch_size",
            t.batch_size,
            f"the global batch does not split over data = {data} ranks",
            f"use a multiple of {data}, e.g. {data * max(1, t.batch_size // data)}",
        )
    per_rank = t.batch_size // data
    if t.micro_batch_size is not None and per_rank % t.micro_batch_size:
        raise _fail(
            "train.micro_batch_size",
            t.micro_batch_size,
            f"global batch {t.batch_size} = data {data} × "
            f"{per_rank} per rank, and {per_rank} is not a multiple of {t.micro_batch_size}",
            f"use a divisor of {per_rank}, e.g. {_nearest(_divisors(per_rank), t.micro_batch_size, 1)}",
        )
    if p.microbatches is not None:
        mbs = t.micro_batch_size or (
            per_rank // p.microbatches if per_rank % p.microbatches == 0 else None
        )
        if mbs is None or per_rank != mbs * p.microbatches:
            raise _fail(
                "parallelism.microbatches",
                p.microbatches,
                f"each data rank gets {per_rank} sequences "
                f"(batch {t.batch_size} / data {data})"
                + (f" in micro-batches of {mbs}" if mbs else ""),
                f"use microbatches {_nearest(_divisors(per_rank), p.microbatches)} or change batch_size",
            )


def check_world(cfg: TrainConfig, procs: int) -> None:
    """Does this layout fit ``procs`` processes (GPUs)? Raises ConfigError if not."""
    p = cfg.parallelism
    mp = p.model_parallel
    parts = (
        " × ".join(
            f"{k}={v}"
            for k, v in (
                ("tensor", p.tensor),
                ("pipeline", p.pipeline),
                ("sequence", p.sp_in_world),
            )
            if v > 1
        )
        or "1"
    )
    if cfg.data_degree is None:
        if procs % mp:
            big = "tensor" if p.tensor >= p.pipeline else "pipeline"
            other = mp // getattr(p, big)
            ok = [
                d
                for d in _divisors(procs // other if procs % other == 0 else 1)
                if big != "tensor" or cfg.model.heads % d == 0
            ]
            raise ConfigError(
                f"parallelism: {procs} GPUs cannot be split as {parts} ({mp} does not divide "
                f"{procs}); try {big} {_nearest(ok, getattr(p, big))}",
                f"parallelism.{big}",
                getattr(p, big),
            )
        return
    need = cfg.data_degree * mp
    if need != procs:
        fix = (
            f"set data: {procs // mp} or data: auto"
            if procs % mp == 0
            else f"use {need} processes ({procs} is not a multiple of {parts} = {mp})"
        )
        raise ConfigError(
            f"parallelism: data={cfg.data_degree} × {parts} needs {need} processes, but {procs} were "
            f"requested; {fix}",
            "parallelism.data",
            cfg.data_degree,
        )


# -- loading and error messages ---------------------------------------------------------------
class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, but a key written twice is an error (PyYAML silently keeps the last one)."""


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise ConfigError(
                f"{key} appears twice in one section (lines {seen[key]} and {key_node.start_mark.line + 1}); "
                f"YAML would silently keep the last one: delete one of them",
                str(key),
                None,
            )
        seen[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def _read(source: str | Path | dict) -> Any:
    if isinstance(source, dict):
        return source
    if isinstance(source, Path) or (
        isinstance(source, str)
        and "\n" not in source
        and source.strip().endswith((".yaml", ".yml"))
    ):
        path = Path(source)
        if not path.is_file() and (CONFIG_DIR / path).is_file():
            path = CONFIG_DIR / path  # a bundled example: load_config("seed.yaml")
        if not path.is_file():
            raise ConfigError(
                f"config file {str(source)!r} not found; bundled examples: "
                f"{sorted(p.name for p in CONFIG_DIR.glob('*.yaml'))}",
                "source",
                str(source),
            )
        source = path.read_text()
    try:
        return yaml.load(source, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(
            f"YAML syntax error{where}: {getattr(e, 'problem', e)}; check the indentation "
            f"(two spaces under each section) and the ':' after every key",
            "yaml",
            None,
        ) from None


def load_config(source: str | Path | dict, world_size: int | None = None) -> TrainConfig:
    """A validated TrainConfig from a YAML file path, a YAML string or a dict.

    With ``world_size`` (the processes/GPUs requested) the layout is also checked against it and
    ``data: auto`` is resolved. Raises :class:`ConfigError` with one actionable message.
    """
    raw = _read(source)
    if not isinstance(raw, dict):
        raise ConfigError(
            f"a config must be a mapping with sections parallelism/train/model, got "
            f"{type(raw).__name__} {raw!r:.60}; start the file with 'parallelism:'",
            "config",
            raw,
        )
    try:
        cfg = TrainConfig.model_validate(raw)
    except ValidationError as e:
        raise _translate(e, raw) from None
    return cfg.resolve(world_size) if world_size is not None else cfg


_EXAMPLES = {
    "train": "{batch_size: 128, learning_rate: 3e-4}",
    "batch_size": 128,
    "learning_rate": "3e-4",
    "precision": "bf16",
    "tensor": 2,
    "pipeline": 2,
    "data": 8,
    "sequence": 2,
    "microbatches": 4,
    "zero_stage": 1,
    "steps": 100,
    "save_interval": 1000,
    "keep_last": 3,
}
_HINTS = {
    "parallel": "a legacy config.py key: migrate with helpers.config.legacy.migrate_legacy",
    "fp16": "precision lives in train: precision: fp16",
    "optimizer": "the optimizer is set by the training script",
    "lr": "did you mean 'learning_rate'?",
    "global_batch_size": "did you mean 'batch_size'? (it is the global batch)",
}
_HINTS.update(
    {
        ax: f"did you mean '{name}'? (the config spells out the axis names dp/tp/pp/sp)"
        for ax, name in (("dp", "data"), ("tp", "tensor"), ("pp", "pipeline"), ("sp", "sequence"))
    }
)


def _field_of(loc: tuple) -> tuple[str, str]:
    names = [
        str(x)
        for x in loc
        if isinstance(x, str) and not x.startswith(("int", "literal", "function"))
    ]
    return ".".join(names), (names[-1] if names else "config")


def _get(raw: Any, loc: tuple) -> Any:
    for key in loc:
        if isinstance(raw, dict) and key in raw:
            raw = raw[key]
    return raw


def _translate(err: ValidationError, raw: dict) -> ConfigError:
    """The first pydantic error as one ConfigError (field, value, fix); the rest are listed after."""
    errors = err.errors(include_url=False)
    e = errors[0]
    ctx_error = (e.get("ctx") or {}).get("error")
    if isinstance(ctx_error, ConfigError):
        return ctx_error
    field, key = _field_of(e["loc"])
    value, kind = e.get("input"), e["type"]
    example = _EXAMPLES.get(key, 1)
    if kind == "extra_forbidden":
        parent = _get(raw, e["loc"][:-1])
        section = field.rsplit(".", 1)[0] if "." in field else "config"
        valid = list(
            (
                TrainConfig if section == "config" else TrainConfig.model_fields[section].annotation
            ).model_fields
        )
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
        fix = _HINTS.get(key) or (f"did you mean '{close[0]}'?" if close else "remove it")
        msg = _fail(
            field,
            parent.get(key) if isinstance(parent, dict) else value,
            f"unknown key in {section}",
            f"{fix} (valid keys: {', '.join(valid)})",
        )
    elif kind == "missing":
        msg = _fail(field, "(missing)", "required", f"add it, e.g. {key}: {example}")
    elif kind == "literal_error":
        valid = [x.strip(" '") for x in e["ctx"]["expected"].replace(" or ", ",").split(",")]
        close = difflib.get_close_matches(str(value).lower(), valid, n=1, cutoff=0.3)
        hint = f"did you mean '{close[0]}'? " if close else ""
        if key == "sequence_mode" and str(value).lower() in ("sequence", "1d"):
            hint = "legacy mode names do not exist any more; "
        if key == "kind" and "gpt" in str(value).lower():
            hint = "GPT-2 loses its causal mask under HybridParallelPlugin without flash attention (Chapter 1); "
        msg = _fail(field, value, "not a valid choice", f"{hint}valid: {', '.join(valid)}")
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal"):
        bound = e["ctx"].get("ge", e["ctx"].get("gt", e["ctx"].get("le")))
        rel = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤"}[kind]
        fix = (
            "ZeRO stages are 0 (off), 1, 2 and 3"
            if key == "zero_stage"
            else "a degree counts processes: 1 switches the dimension off"
            if e["loc"][0] == "parallelism"
            else (
                "0 turns clipping off"
                if key == "max_grad_norm"
                else f"use a positive value, e.g. {key}: {example}"
            )
        )
        msg = _fail(field, value, f"must be {rel} {bound}", fix)
    elif kind in ("model_type", "dict_type", "model_attributes_type"):
        msg = _fail(
            field,
            value,
            "must be a mapping (a section of keys)",
            f"write it as '{key}:' followed by indented 'key: value' lines",
        )
    elif kind == "string_too_short":
        msg = _fail(field, value, "must not be empty", f"name a folder, e.g. {key}: ckpt/run1")
    elif kind.startswith(("int_", "float_", "string_", "value_error")) or kind == "bool_type":
        want = {"int": "a whole number", "flo": "a number", "str": "a string"}.get(
            kind[:3], "a number"
        )
        fix = f"write e.g. {key}: {example}"
        if (
            isinstance(value, str)
            and value.replace("e", "").replace(".", "").replace("-", "").isdigit()
        ):
            fix = f"write the digits, e.g. {key}: {int(float(value)) if float(value).is_integer() else value}"
        msg = _fail(field, value, f"must be {want}, not {type(value).__name__}", fix)
    else:
        msg = _fail(field, value, e["msg"], "see the chapter's table of fields")
    if len(errors) > 1:
        msg = ConfigError(
            f"{msg} (and {len(errors) - 1} more problem(s) after this one)", msg.field, msg.value
        )
    return msg
