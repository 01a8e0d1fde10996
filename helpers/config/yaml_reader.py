"""A config's YAML text read as a YAML 1.2 reader reads it (Chapter 4, "What the loader
guarantees").

PyYAML's ``safe_load`` implements YAML 1.1: its resolver (``yaml/resolver.py``) reads ``0100`` as
the octal 64, ``yes``/``no``/``on``/``off`` as booleans, ``1:30`` as the base-60 number 90,
``1_000`` as 1000 and ``0b101`` as 5, but ``1e3`` (no dot, no sign after the ``e``) as a string.
YAML 1.2's core schema (yaml.org/spec/1.2.2, section 10.3) reads ``0100`` as 100, the other words
and forms as strings and ``1e3`` as 1000.0. :class:`Reader` resolves plain scalars by the 1.2
core schema, so that a file means what every current reader says it means, and refuses the one
form on which the two disagree about a *number*: an integer with a leading zero (64 or 100?).
A 1.1-only word that reaches a number or boolean field as a string is refused by the schema, with
the trap named (:func:`helpers.config.hints.yaml11_note`). :func:`dump` writes what
:func:`read` reads back unchanged (``yaml.safe_dump`` writes ``'1e3'`` plain, a string to YAML
1.1 and a number to 1.2).

It also keeps what ``safe_load`` lacks for a config: a key written twice is an error (PyYAML keeps
the last one), merge keys (``<<: *base``) work, a second document (``---``) is named as such,
nesting is limited to :data:`MAX_DEPTH` levels, and aliases may expand to at most
:data:`MAX_VALUES` values: aliases of aliases grow tenfold per level (a "billion laughs"), and an
error message would otherwise print the whole expansion.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from helpers.parallel.errors import ConfigError

MAX_VALUES = 1000  # values once every alias is expanded (a config has a few dozen)
MAX_DEPTH = 20  # nesting levels (a config has two: section, key)
INT, FLOAT, BOOL, NULL = (f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "null"))
MERGE, STR = "tag:yaml.org,2002:merge", "tag:yaml.org,2002:str"
# YAML 1.2 core schema (spec 1.2.2, 10.3.2); decimal integers with a leading zero are caught below
_INT12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT12 = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_SPECIAL = re.compile(r"^(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")
_BOOL12 = {word: word.lower() == "true" for word in ("true", "True", "TRUE", "false", "False")}
_BOOL12["FALSE"] = False
_LEADING_ZERO = re.compile(r"^[-+]?0[0-9]+$")


class Reader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with YAML 1.2's core schema and the limits of the module notes."""

    yaml_implicit_resolvers: dict = {}  # filled below: YAML 1.2's table, not PyYAML's 1.1 one

    def __init__(self, stream):
        super().__init__(stream)
        self.path: list[str] = []
        self.aliases: list[tuple[str, str, Any, Any]] = []  # (path, anchor, mark, node)

    def where(self) -> str:
        return ".".join(self.path).replace(".[", "[") or "config"

    def compose_node(self, parent, index):
        if isinstance(parent, MappingNode):
            self.path.append(index.value if isinstance(index, ScalarNode) else "(a key)")
        elif isinstance(parent, SequenceNode):
            self.path.append(f"[{index}]")
        try:
            if len(self.path) > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise ConfigError(
                    f"{self.where()} (line {line}): nested more than {MAX_DEPTH} levels deep; a "
                    f"config has two levels (section, key): flatten it",
                    self.where(),
                    None,
                )
            alias = self.check_event(AliasEvent) and self.peek_event()
            node = super().compose_node(parent, index)
            if alias:
                self.aliases.append((self.where(), alias.anchor, alias.start_mark, node))
            elif node.tag == INT and isinstance(node, ScalarNode):
                _check_int(self, node)
            return node
        finally:
            if parent is not None:
                self.path.pop()

    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        if text.startswith(("0o", "0x")):
            return int(text[2:], 8 if text[1] == "o" else 16)
        return int(text)

    def construct_yaml_float(self, node):
        text = self.construct_scalar(node)
        if not (_FLOAT12.match(text) or _SPECIAL.match(text)):  # an explicit !!float tag
            raise yaml.constructor.ConstructorError(
                None, None, f"!!float takes a YAML 1.2 number, not {text!r}", node.start_mark
            )
        return float(text.replace(".", "") if _SPECIAL.match(text) else text)  # .inf → inf

    def construct_yaml_bool(self, node):
        text = self.construct_scalar(node)
        if text not in _BOOL12:
            raise yaml.constructor.ConstructorError(
                None, None, f"!!bool takes true or false in YAML 1.2, not {text!r}", node.start_mark
            )
        return _BOOL12[text]

    def construct_yaml_map(self, node):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE or not isinstance(key_node, ScalarNode):
                continue  # merged keys may be overridden: that is what merging is for
            key, line = self.construct_object(key_node), key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(
                    f"{key} appears twice in one section (lines {seen[key]} and {line}); YAML "
                    f"would silently keep the last one: delete one of them",
                    str(key),
                    None,
                )
            seen[key] = line
        data: dict = {}
        yield data
        data.update(self.construct_mapping(node))  # SafeConstructor: merge keys flattened first


for tag, regex, first in (
    (NULL, r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    (BOOL, r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    (INT, _INT12.pattern, list("-+0123456789")),
    (FLOAT, _FLOAT12.pattern, list("-+.0123456789")),
    (FLOAT, _SPECIAL.pattern, list("-+.")),
    (MERGE, r"^(?:<<)$", ["<"]),
):
    Reader.add_implicit_resolver(tag, re.compile(regex), first)
Reader.add_constructor(INT, Reader.construct_yaml_int)
Reader.add_constructor(FLOAT, Reader.construct_yaml_float)
Reader.add_constructor(BOOL, Reader.construct_yaml_bool)
Reader.add_constructor("tag:yaml.org,2002:map", Reader.construct_yaml_map)


def _check_int(reader: Reader, node: ScalarNode) -> None:
    text = node.value
    if _LEADING_ZERO.match(text):  # YAML 1.1: octal (or a string: 08, 09); YAML 1.2: decimal
        digits = text.lstrip("+-").lstrip("0") or "0"
        try:
            old = f"the octal {int(text, 8)}"
        except ValueError:
            old = "a string"
        raise ConfigError(
            f"{reader.where()} = {text} (line {node.start_mark.line + 1}): a leading zero is read "
            f"as {old} by YAML 1.1 readers (PyYAML's safe_load) and as {int(text)} by YAML 1.2 "
            f"readers; write {text[0] if text[0] == '-' else ''}{digits} (or quote it, "
            f"'{text}', for a string)",
            reader.where(),
            text,
        )
    if not _INT12.match(text):
        raise ConfigError(
            f"{reader.where()} = !!int {text} (line {node.start_mark.line + 1}): not a YAML 1.2 "
            f"integer; write plain digits",
            reader.where(),
            text,
        )


def _expanded(node, sizes: dict, busy: set) -> float:
    """Values ``node`` stands for once every alias is expanded (a cycle counts as too many)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in busy:
        return float("inf")  # an alias inside its own anchor: an endless value
    busy.add(key)
    children = node.value if isinstance(node, SequenceNode) else []
    if isinstance(node, MappingNode):
        children = [n for pair in node.value for n in pair]
    sizes[key] = 1 + sum(_expanded(c, sizes, busy) for c in children)
    busy.discard(key)
    return sizes[key]


def _check_size(reader: Reader, root) -> None:
    sizes: dict = {}
    total = _expanded(root, sizes, set())
    if total <= MAX_VALUES:
        return
    if not reader.aliases:
        raise ConfigError(
            f"config: {total:,.0f} values, more than the {MAX_VALUES:,} a config may hold (it "
            f"has a few dozen); is this the right file?",
            "config",
            None,
        )
    path, anchor, mark, node = max(reader.aliases, key=lambda a: _expanded(a[3], sizes, set()))
    grows = _expanded(node, sizes, set())
    what = (
        f"expands to {grows:,} values and the file to {total:,}, more than the {MAX_VALUES:,} a "
        f"config may hold (aliases of aliases grow tenfold per level, a 'billion laughs')"
        if grows < float("inf")
        else "sits inside its own anchor, an endless value"
    )
    raise ConfigError(
        f"{path} = *{anchor} (line {mark.line + 1}): the alias {what}; write the values out",
        path,
        f"*{anchor}",
    )


def read(text: str) -> Any:
    """The one document of ``text`` as Python values (None for an empty text)."""
    reader = Reader(text)
    try:
        if not reader.check_node():
            return None
        root = reader.get_node()
        if reader.check_node():
            line = reader.peek_event().start_mark.line + 1
            raise ConfigError(
                f"yaml: a second YAML document starts at line {line} ('---'); a config is one "
                f"document (PyYAML's safe_load refuses a second one, other readers keep only "
                f"the first): delete the '---' and put every section in one mapping, or keep "
                f"each config in its own file",
                "yaml",
                None,
            )
        _check_size(reader, root)
        return reader.construct_document(root)
    except yaml.YAMLError as e:
        raise syntax_error(e) from None
    except RecursionError:
        raise ConfigError(
            "yaml: nested too deeply to read; a config has two levels (section, key)",
            "yaml",
            None,
        ) from None
    finally:
        reader.dispose()


def syntax_error(e: yaml.YAMLError) -> ConfigError:
    """A PyYAML error as one message whose fix fits the problem."""
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = str(getattr(e, "problem", None) or e)
    context = getattr(e, "context", None)
    problem = f"{context}: {problem}" if context and "anchor" in context else problem
    if isinstance(e, yaml.reader.ReaderError):
        return ConfigError(
            f"yaml: the text holds the character #x{e.character:04x} at position {e.position}, "
            f"which YAML does not allow: save the file as UTF-8 text",
            "yaml",
            None,
        )
    fix = "check the indentation (two spaces under each section) and the ':' after every key"
    if "'\\t'" in problem:
        fix = "YAML forbids tabs for indentation: indent with spaces"
    elif "undefined alias" in problem:
        fix = "define the anchor (&name) before its first use (*name)"
    elif "duplicate anchor" in problem:
        fix = "give each anchor (&name) its own name"
    elif "constructor for the tag" in problem:
        fix = "a config holds plain values (numbers, strings, true/false, null): remove the tag"
    elif "for merging" in problem:
        fix = "'<<:' merges an anchored mapping (<<: *name) or a list of them, not a single value"
    elif "!!bool" in problem:
        fix = "write true or false"
    elif "!!float" in problem:
        fix = "write a number such as 3e-4 or 0.5"
    return ConfigError(f"YAML syntax error{where}: {problem}; {fix}", "yaml", None)


class Writer(yaml.SafeDumper):
    """``yaml.SafeDumper`` that quotes every string :class:`Reader` would read as another type."""


def _string(dumper: Writer, value: str):
    plain = Reader.resolve(Reader, ScalarNode, value, (True, False)) == STR
    return dumper.represent_scalar(STR, value, style=None if plain else "'")


Writer.add_representer(str, _string)


def dump(data: Any) -> str:
    """``data`` as YAML text that :func:`read` reads back as ``data``."""
    return yaml.dump(data, Dumper=Writer, sort_keys=False, allow_unicode=True)
