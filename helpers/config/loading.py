"""Loading a training configuration: a YAML file, a YAML string or a dict → a validated
:class:`~helpers.config.schema.TrainConfig` (Chapter 4, "The schema").

The text is read as YAML 1.2 by :mod:`helpers.config.yaml_reader` (PyYAML alone reads YAML 1.1): a
key written twice, a second document and a YAML syntax error are reported with their line.
:func:`decode` reads UTF-8, with or without a byte-order mark, and, as the YAML specification
allows, UTF-16 or UTF-32 with one; any other file is refused with what to do. Top-level keys
starting with ``x-`` are ignored (a place for anchors that merge keys, ``<<: *name``, copy).
pydantic's errors are turned into one actionable :class:`~helpers.parallel.errors.ConfigError` by
:mod:`helpers.config.hints`. A bare file name is looked up among the book's bundled examples in
:data:`CONFIG_DIR` when it is not found where it was given.
"""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any


from helpers.parallel.errors import ConfigError, fail
from helpers.config.schema import TrainConfig
from helpers.config.yaml_reader import read

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


EXTENSION_PREFIX = "x-"  # top-level keys ignored, a place for anchors (as in Docker Compose)
MAX_BYTES = 1 << 20  # a config is a few hundred bytes; a megabyte is another kind of file


def decode(data: bytes, name: str) -> str:
    """The text of a config file: UTF-8 (a byte-order mark allowed), or UTF-16/32 with one."""
    if len(data) > MAX_BYTES:
        raise ConfigError(
            f"config file {name!r} is {len(data):,} bytes: a config is a few hundred (the loader "
            f"reads at most {MAX_BYTES:,}); is this the right file?",
            "source",
            name,
        )
    for bom, codec in (
        (codecs.BOM_UTF32_LE, "utf-32"),
        (codecs.BOM_UTF32_BE, "utf-32"),
        (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"),
        (codecs.BOM_UTF16_BE, "utf-16"),
    ):
        if data.startswith(bom):
            return data.decode(codec)
    save = "save it as UTF-8 (an editor's 'save with encoding', or iconv -t UTF-8)"
    if b"\x00" in data:
        raise ConfigError(
            f"config file {name!r} holds NUL bytes: it looks like UTF-16 or UTF-32 without a "
            f"byte-order mark, which the loader cannot tell apart; {save}",
            "source",
            name,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"config file {name!r} is not UTF-8 (byte 0x{data[e.start]:02x} on line {line}, "
            f"perhaps Latin-1 or Windows-1252); {save}",
            "source",
            name,
        ) from None


def _read(source: str | Path | dict) -> Any:
    if isinstance(source, dict):
        return source
    if isinstance(source, Path) or (
        isinstance(source, str)
        and "\n" not in source
        and source.strip().endswith((".yaml", ".yml"))
    ):
        path = Path(source)
        if not path.exists() and (CONFIG_DIR / path).is_file():
            path = CONFIG_DIR / path  # a bundled example: load_config("seed.yaml")
        if not path.is_file():
            what = "is a folder, not a file" if path.is_dir() else "not found"
            raise ConfigError(
                f"config file {str(source)!r} {what}; bundled examples: "
                f"{sorted(p.name for p in CONFIG_DIR.glob('*.yaml'))}",
                "source",
                str(source),
            )
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ConfigError(
                f"config file {str(source)!r} cannot be read ({e.strerror}); check its permissions",
                "source",
                str(source),
            ) from None
        source = decode(data, str(source))
    elif not isinstance(source, str):
        raise fail(
            "source",
            f"({type(source).__name__})",
            "load_config reads a YAML file path, a YAML string or a dict",
            "pass one of those",
        )
    return read(source)


def load_config(source: str | Path | dict, world_size: int | None = None) -> TrainConfig:
    """A validated TrainConfig from a YAML file path, a YAML string or a dict.

    With ``world_size`` (the processes/GPUs requested) the layout is also checked against it and
    ``data: auto`` is resolved. Raises :class:`ConfigError` with one actionable message.
    """
    raw = _read(source)
    if isinstance(raw, dict):  # x-... keys hold anchors for merge keys (<<: *name)
        raw = {k: v for k, v in raw.items() if not str(k).startswith(EXTENSION_PREFIX)}
    else:
        got = "(empty)" if raw is None else f"{raw!r:.60}"
        raise fail(
            "config",
            got if raw is None else raw,
            "a config must be a mapping with sections parallelism/train/model, got "
            + ("an empty file" if raw is None else type(raw).__name__),
            "start the file with 'parallelism:'",
        )
    return TrainConfig.from_raw(raw, world_size)
