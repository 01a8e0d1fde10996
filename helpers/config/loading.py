"""Loading a training configuration: a YAML file, a YAML string or a dict → a validated
:class:`~helpers.config.schema.TrainConfig` (Chapter 4, "The schema").

A key written twice and a YAML syntax error are reported with their line; pydantic's errors are
turned into one actionable :class:`~helpers.config.errors.ConfigError` by
:mod:`helpers.config.hints`. A bare file name is looked up among the book's bundled examples in
:data:`CONFIG_DIR` when it is not found where it was given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from helpers.config.errors import ConfigError, fail
from helpers.config.hints import translate
from helpers.config.schema import TrainConfig

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, but a key written twice is an error (PyYAML silently keeps the last one)."""


def _mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ConfigError(
                f"{key} appears twice in one section (lines {seen[key]} and {line}); "
                f"YAML would silently keep the last one: delete one of them",
                str(key),
                None,
            )
        seen[key] = line
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
        got = "(empty)" if raw is None else f"{raw!r:.60}"
        raise fail(
            "config",
            got if raw is None else raw,
            "a config must be a mapping with sections parallelism/train/model, got "
            + ("an empty file" if raw is None else type(raw).__name__),
            "start the file with 'parallelism:'",
        )
    try:
        cfg = TrainConfig.model_validate(raw)
    except ValidationError as e:
        raise translate(e, raw) from None
    return cfg.resolve(world_size) if world_size is not None else cfg
