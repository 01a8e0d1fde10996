"""The sections of a training configuration file and the validated :class:`TrainConfig`.

Used by Chapter 4 (configuration files) and by Chapter 5's training entry point. The shape is
the source guide's (``parallelism: {data, tensor, pipeline}`` and ``train: {batch_size,
learning_rate, precision, save_interval}``) plus what a real run needs: the sequence degree and
mode, the ZeRO stage, micro-batches, the model, the checkpoint folder and the seed, and,
optionally, the GPUs' memory (``hardware``), against which Chapter 7's memory model checks the
layout (:mod:`helpers.config.memory_fit`).

Related modules: :mod:`helpers.config.loading` (YAML or a dict → a TrainConfig),
:mod:`helpers.config.rules` (the cross-field rules every TrainConfig passes),
:mod:`helpers.config.hints` (pydantic's errors as one actionable message),
:mod:`helpers.config.plugin` (config → plugin kwargs) and :mod:`helpers.config.legacy` (legacy
``config.py`` → this format).
"""

from __future__ import annotations

import warnings
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, Strict
from pydantic import ValidationError, ValidationInfo, model_validator

from helpers.config import paths
from helpers.config.hints import translate
from helpers.config.memory_fit import check_fits
from helpers.config.rules import check, check_world
from helpers.config.yaml_reader import dump
from helpers.parallel.errors import ConfigError, ConfigWarning, fail
from helpers.models.shape import ModelShape
from helpers.parallel.degrees import Degrees
from helpers.parallel.vocab import OWN_AXIS_SP_MODES, Precision, SpMode


def _data_degree(v: Any) -> Any:
    if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
        return v
    fix = (
        f"write the digits, data: {v}"
        if isinstance(v, str) and v.isdigit()
        else "use a whole number ≥ 1, or 'auto' to take what tensor × pipeline × sequence leave"
    )
    raise fail("parallelism.data", v, "not a data-parallel degree", fix)


def _not_bool(v: Any) -> Any:
    if isinstance(v, bool):  # YAML 'yes'/'true' would otherwise pass as 1 / 1.0
        raise ValueError("bool")
    return v


Degree = Annotated[int, Strict(), Field(ge=1)]
Count = Annotated[int, Strict(), Field(ge=0)]
# finite only: YAML reads .inf, .nan and 1e999 as floats, and inf > 0 would pass a bound
Number = Annotated[float, BeforeValidator(_not_bool), Field(allow_inf_nan=False)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Parallelism(Section):
    data: Annotated[int | str, BeforeValidator(_data_degree)] = "auto"  # whole number ≥ 1 or "auto"
    tensor: Degree = 1
    pipeline: Degree = 1
    sequence: Degree = 1
    sequence_mode: SpMode | None = None
    zero_stage: Annotated[int, Strict(), Field(ge=0, le=3)] = 0
    microbatches: Degree | None = None
    # LowLevelZeroPlugin's / HybridParallelPlugin's (ZeRO) overlap_communication; None: their
    # default, True
    overlap_communication: Annotated[bool, Strict()] | None = None

    @property
    def sp_in_world(self) -> int:
        """How many processes the sequence axis adds: split_gather/ring reuse the tensor group."""
        return self.sequence if self.sequence_mode in OWN_AXIS_SP_MODES else 1

    @property
    def model_parallel(self) -> int:
        """Processes one data-parallel replica spans: tensor × pipeline × (sequence)."""
        return self.tensor * self.pipeline * self.sp_in_world


class Train(Section):
    batch_size: Degree
    learning_rate: Annotated[Number, Field(gt=0)]
    precision: Precision = "fp32"
    save_interval: Count = 0  # steps between checkpoints; 0 = never
    keep_last: Degree | None = None  # newest checkpoints kept on disk; None = all
    micro_batch_size: Degree | None = None  # sequences per forward pass on one data-parallel rank
    steps: Degree = 100
    seed: Count = 42
    checkpoint_dir: Annotated[
        str,
        Strict(),
        Field(
            min_length=1,
            description="where checkpoints are written: ~ and $VAR are expanded; a relative path "
            "is resolved against the training processes' working directory, the repository root "
            "under helpers.run.launch (helpers.config.paths)",
        ),
        AfterValidator(paths.checkpoint_dir),
    ] = "ckpt"  # /ckpt*/ is git-ignored
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

    def shape(self) -> ModelShape:
        """This section as the book's one model shape (Llama-style, FFN width 8h/3 to 64)."""
        return ModelShape.llama(
            self.layers, self.hidden, self.heads, self.kv, self.vocab, seq_len=self.seq_len
        )


class Hardware(Section):
    # one GPU's memory in GiB (2**30 bytes: torch.cuda.mem_get_info()[1] / 2**30); None: unchecked
    gpu_memory_gib: (
        Annotated[
            Number,
            Field(
                gt=0,
                description="memory of one GPU in GiB: the loader predicts the busiest GPU's peak "
                "with Chapter 7's memory model and refuses a layout above it (helpers.config."
                "memory_fit)",
            ),
        ]
        | None
    ) = None


class TrainConfig(Section):
    """The whole configuration; build it with :func:`helpers.config.loading.load_config` to get
    clear errors."""

    parallelism: Parallelism = Parallelism()
    train: Train
    model: Model = Model()
    hardware: Hardware = Hardware()

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> "TrainConfig":
        check(self)
        pending = (info.context or {}).get("world_pending")  # load_config resolves, then checks
        if self.hardware.gpu_memory_gib is not None and not pending:
            check_fits(self)
        return self

    @classmethod
    def from_raw(cls, raw: dict, world_size: int | None = None) -> "TrainConfig":
        """A validated config from its sections as plain data, pydantic's errors as one
        :class:`ConfigError` (:func:`helpers.config.hints.translate`). With ``world_size`` the
        layout is also checked against it and ``data: auto`` is resolved (as
        :func:`helpers.config.loading.load_config`, which reads the file first)."""
        with warnings.catch_warnings():
            if world_size is not None:  # resolve() validates again, and warns once, for the world
                warnings.simplefilter("ignore", ConfigWarning)
            try:
                cfg = cls.model_validate(raw, context={"world_pending": world_size is not None})
            except ValidationError as e:
                raise translate(e, raw, cls) from None
        return cfg.resolve(world_size) if world_size is not None else cfg

    # -- derived quantities -------------------------------------------------------------
    @property
    def data_degree(self) -> int | None:
        """The data-parallel degree, or None while it is 'auto' and no world size is known."""
        d = self.parallelism.data
        return None if d == "auto" else d

    @property
    def degrees(self) -> Degrees:
        """The layout as :class:`helpers.parallel.degrees.Degrees` (what the plugin, the rank grid
        and the planner take); data None while it is 'auto' and no world size is known."""
        p = self.parallelism
        return Degrees(self.data_degree, p.tensor, p.pipeline, p.sequence, p.sequence_mode)

    def world_size(self, procs: int | None = None) -> int:
        """Processes this layout needs (data × tensor × pipeline × sequence for all_to_all and
        ring_attn)."""
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
        """Micro-batches per step: the pipeline schedule's, or gradient-accumulation steps at
        pp = 1."""
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
        """The config as plain data (without ``hardware`` while it is all defaults)."""
        out = self.model_dump(mode="json")
        if self.hardware == Hardware():
            del out["hardware"]
        return out

    def to_yaml(self) -> str:
        """YAML text that :func:`helpers.config.loading.load_config` reads back as this config."""
        return dump(self.to_dict())

    def with_changes(self, changes: dict) -> "TrainConfig":
        """A new validated config with ``changes`` merged section by section."""
        raw = self.to_dict()
        for section, values in changes.items():
            raw[section] = {**raw.get(section, {}), **values}
        return self.from_raw(raw)
