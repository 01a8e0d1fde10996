"""Legacy Colossal-AI ``config.py`` files → the YAML/dict format of :mod:`helpers.config.schema`.

Used by Chapter 4 ("Migrating a legacy ``config.py``"). Before the Booster/plugin API,
Colossal-AI's engine (today the deprecated ``colossalai.legacy`` package, still shipped in 0.5.0)
read a Python file with module-level names such as::

    parallel = dict(pipeline=2, tensor=dict(size=2, mode="1d"))
    fp16 = dict(mode=AMP_TYPE.NAIVE)
    gradient_handler = [dict(type="SequenceParallelGradientHandler")]
    NUM_MICRO_BATCHES = 4

The file is read by :func:`helpers.config.legacy_reader.parse_legacy`, which never executes it.
:func:`migrate_legacy` returns the new-format dict and one note per legacy entry saying what it
became or why it no longer exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.parallel.errors import ConfigError
from helpers.config.legacy_reader import evaluated, parse_legacy
from helpers.config.loading import load_config
from helpers.config.schema import TrainConfig
from helpers.parallel.vocab import OWN_AXIS_SP_MODES, SpMode

REMOVED_TENSOR_MODES = {
    "2d": "2D tensor parallelism (SUMMA, Xu et al. 2021)",
    "2.5d": "2.5D tensor parallelism (Wang et al. 2021)",
    "3d": "3D tensor parallelism (Bian et al. 2021)",
}
_MODEL_NAMES = {
    "SEQ_LENGTH": "seq_len",
    "SEQ_LEN": "seq_len",
    "DEPTH": "layers",
    "NUM_LAYERS": "layers",
    "NUM_LAYER": "layers",
    "HIDDEN_SIZE": "hidden",
    "HIDDEN_DIM": "hidden",
    "VOCAB_SIZE": "vocab",
    "NUM_ATTENTION_HEADS": "heads",
    "NUM_HEADS": "heads",
    "ATTENTION_HEAD": "heads",
}
_TRAIN_NAMES = {
    "GLOBAL_BATCH_SIZE": "batch_size",
    "TRAIN_ITERS": "steps",
    "LEARNING_RATE": "learning_rate",
    "LR": "learning_rate",
    "clip_grad_norm": "max_grad_norm",
    "seed": "seed",
    "SEED": "seed",
}
_AMP = {
    "NAIVE": "Colossal-AI's own fp16 with fp32 master weights: the plugins' precision='fp16'",
    "TORCH": "torch.cuda.amp: TorchDDPPlugin with Booster(mixed_precision='fp16')",
    "APEX": "NVIDIA Apex AMP: precision fp16 (Booster also offers mixed_precision='fp16_apex')",
}


def _size(value: Any, what: str) -> int:
    if isinstance(value, dict):
        value = value.get("size", 1)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(
            f"parallel.{what} = {value!r}: not a degree; write {what}=2 or {what}=dict(size=2)",
            f"parallel.{what}",
            value,
        )
    return value


def migrate_legacy(
    source: str | Path,
    world_size: int | None = None,
    sequence_mode: SpMode = "all_to_all",
    extra: dict | None = None,
) -> tuple[dict, list[str]]:
    """(new-format dict, notes) for a legacy ``config.py`` given as a path or as text.

    ``world_size``: the processes the legacy run used (legacy ``BATCH_SIZE`` is per data-parallel
    rank, so the global batch needs it). ``sequence_mode``: the current mode for the legacy
    ``tensor.mode="sequence"``. ``extra``: sections merged in for what the file does not say
    (e.g. ``{"train": {"learning_rate": 1e-4}}``). The dict still has to pass :func:`load_config`
    (:func:`migrate_to_config` does both).
    """
    names, notes = parse_legacy(source)
    par = {"data": "auto"}
    train: dict[str, Any] = {}
    model: dict[str, Any] = {}
    legacy = evaluated("parallel", names.pop("parallel", {}))
    if not isinstance(legacy, dict):
        raise ConfigError(
            f"parallel = {legacy!r}: expected dict(pipeline=..., tensor=dict(size=..., mode=...))",
            "parallel",
            legacy,
        )
    for key in legacy:
        if key not in ("pipeline", "tensor", "data"):
            raise ConfigError(
                f"parallel.{key} = {legacy[key]!r}: not a legacy parallel key; expected pipeline "
                "and tensor (data parallelism was implicit)",
                f"parallel.{key}",
                legacy[key],
            )
    if "data" in legacy:
        par["data"] = _size(legacy["data"], "data")
    par["pipeline"] = _size(legacy.get("pipeline", 1), "pipeline")
    notes.append(f"parallel.pipeline = {par['pipeline']} → parallelism.pipeline")
    tensor = legacy.get("tensor", {"size": 1, "mode": None})
    size = _size(tensor, "tensor")
    mode = tensor.get("mode") if isinstance(tensor, dict) else "1d"
    if isinstance(mode, str):
        mode = mode.lower()
    if mode in REMOVED_TENSOR_MODES:
        raise ConfigError(
            f"parallel.tensor.mode = {mode!r}: {REMOVED_TENSOR_MODES[mode]} has no plugin "
            "equivalent (it survives only in the deprecated colossalai.legacy engine; the Booster "
            "plugins' shardformer does 1D, Megatron-style, tensor parallelism only); "
            "use mode '1d': "
            f"parallelism.tensor: {size}",
            "parallel.tensor.mode",
            mode,
        )
    if mode == "sequence":
        par.update(sequence=size, sequence_mode=sequence_mode)
        notes.append(
            f"parallel.tensor = dict(size={size}, mode='sequence') → parallelism.sequence: {size}, "
            f"sequence_mode: {sequence_mode} (legacy 'sequence' was ring self-attention; "
            "its closest "
            "successor is 'ring_attn', which needs flash-attn; 'all_to_all' splits the same axis "
            "and runs without it)"
        )
    elif mode == "1d" or (mode is None and size == 1):
        par["tensor"] = size
        if size > 1:
            notes.append(
                f"parallel.tensor = dict(size={size}, mode='1d') → parallelism.tensor: {size} "
                "(1D = Megatron-style, the only tensor parallelism shardformer has)"
            )
    else:
        raise ConfigError(
            f"parallel.tensor.mode = {mode!r}: unknown mode; legacy modes were '1d', '2d', "
            "'2.5d', '3d' and 'sequence', and only '1d' and 'sequence' map to the current "
            "plugins",
            "parallel.tensor.mode",
            mode,
        )
    micro = evaluated("NUM_MICRO_BATCHES", names.pop("NUM_MICRO_BATCHES", None))
    if micro is not None and par["pipeline"] > 1:
        par["microbatches"] = micro
        notes.append(f"NUM_MICRO_BATCHES = {micro} → parallelism.microbatches")
    elif micro is not None:
        notes.append(f"NUM_MICRO_BATCHES = {micro} dropped: it only applied with pipeline > 1")
    fp16 = names.pop("fp16", None)
    if fp16 is not None:
        amp = str(fp16.get("mode", "AMP_TYPE.TORCH") if isinstance(fp16, dict) else fp16).split(
            "."
        )[-1]
        train["precision"] = "fp16"
        notes.append(
            f"fp16 = dict(mode=AMP_TYPE.{amp}) → train.precision: fp16 ({_AMP.get(amp, 'fp16')})"
        )
    zero = names.pop("zero", None)
    if zero is not None:
        level = zero.get("level", 3) if isinstance(zero, dict) else 3
        par["zero_stage"] = level
        notes.append(
            f"zero = dict(...) → parallelism.zero_stage: {level} (legacy sharded model = "
            "parameters sharded, i.e. ZeRO-3; GeminiPlugin today)"
        )
    handler = names.pop("gradient_handler", None)
    if handler is not None:
        kinds = (
            [h.get("type") for h in handler if isinstance(h, dict)]
            if isinstance(handler, list)
            else handler
        )
        notes.append(
            f"gradient_handler = {kinds} dropped: gradient handlers belong to the legacy engine "
            "(colossalai.legacy.engine); under the Booster the plugin synchronises gradients "
            "itself (DDP/ZeRO over the data group, and HybridParallelPlugin "
            "all-reduces sequence-parallel gradients over the sp group)"
        )
    for name, key in _TRAIN_NAMES.items():
        if name in names:
            train[key] = evaluated(name, names.pop(name))
            notes.append(f"{name} = {train[key]!r} → train.{key}")
    if "BATCH_SIZE" in names:
        per_rank = evaluated("BATCH_SIZE", names.pop("BATCH_SIZE"))
        if "batch_size" not in train:
            if world_size is None:
                raise ConfigError(
                    f"BATCH_SIZE = {per_rank!r}: legacy BATCH_SIZE is per data-parallel rank, "
                    "so the "
                    "global batch depends on the world size; pass world_size=<processes> (or set "
                    "GLOBAL_BATCH_SIZE)",
                    "BATCH_SIZE",
                    per_rank,
                )
            data = world_size // (
                par.get("tensor", 1)
                * par["pipeline"]
                * (par.get("sequence", 1) if sequence_mode in OWN_AXIS_SP_MODES else 1)
            )
            train["batch_size"] = per_rank * max(1, data)
            notes.append(
                f"BATCH_SIZE = {per_rank} per data rank × data {data} → train.batch_size: "
                f"{train['batch_size']} (global)"
            )
    for name, key in _MODEL_NAMES.items():
        if name in names:
            model[key] = evaluated(name, names.pop(name))
            notes.append(f"{name} = {model[key]!r} → model.{key}")
    for name, value in names.items():
        if not name.startswith("_"):
            notes.append(
                f"{name} dropped: not part of the training configuration "
                "(set it in the training script)"
            )
    new = {"parallelism": par, "train": train, **({"model": model} if model else {})}
    for section, values in (extra or {}).items():
        new[section] = {**new.get(section, {}), **values}
    return new, notes


def migrate_to_config(
    source: str | Path, world_size: int | None = None, **kwargs
) -> tuple[TrainConfig, list[str]]:
    """:func:`migrate_legacy` followed by :func:`~helpers.config.loading.load_config` (same
    errors)."""
    new, notes = migrate_legacy(source, world_size=world_size, **kwargs)
    if "learning_rate" not in new["train"]:
        raise ConfigError(
            "train.learning_rate = (missing): the legacy file does not set LEARNING_RATE (legacy "
            "scripts often set it in train.py); pass extra={'train': {'learning_rate': 1e-4}}",
            "train.learning_rate",
            None,
        )
    return load_config(new, world_size=world_size), notes
