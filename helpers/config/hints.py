"""Pydantic's validation errors as one actionable message (Chapter 4, "The schema").

:func:`translate` turns the first error pydantic reports for a configuration into one
:class:`~helpers.parallel.errors.ConfigError` naming the field, the value and a fix: the closest
valid key or choice, an example value, or a hint for a key from older formats (legacy ``config.py``
names, the axis abbreviations dp/tp/pp/sp). A string that YAML 1.1 (PyYAML's resolver) would have
read as a number or a boolean gets the trap named (:func:`yaml11_note`).
"""

from __future__ import annotations

import difflib
import re
from typing import Any

import yaml
from pydantic import ValidationError

from helpers.parallel.errors import ConfigError, fail
from helpers.parallel.vocab import AXES, AXIS_WORDS

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
    "max_grad_norm": 1.0,
    "overlap_communication": "false",
}
# Colossal-AI 0.5.0 has no fp8 *precision*: fp8 is a switch of the plugins, on top of bf16/fp16
FP8 = (
    "fp8 is not a precision of Colossal-AI 0.5.0's plugins: keep precision: bf16 (or fp16) and "
    "pass use_fp8=True (fp8 matrix multiplies: FP8Hook swaps F.linear for linear_fp8, "
    "colossalai/quantization/fp8_hook.py, which takes only bf16/fp16 inputs, fp8.py:781, and "
    "needs torch._scaled_mm, a GPU of compute capability 8.9 or more) or fp8_communication=True "
    "(fp8-compressed collectives) to the plugin: LowLevelZeroPlugin "
    "(low_level_zero_plugin.py:428-429), HybridParallelPlugin "
    "(hybrid_parallel_plugin.py:1045-1046) or GeminiPlugin (gemini_plugin.py:481-483); "
    "this config format has no field for them"
)
OVERLAP = (
    "it is a parallelism key: parallelism: overlap_communication: true|false "
    "(LowLevelZeroPlugin, or HybridParallelPlugin with ZeRO 1/2)"
)
_HINTS = {
    "parallel": "a legacy config.py key: migrate with helpers.config.legacy.migrate_legacy",
    "use_fp8": FP8,
    "fp8_communication": FP8,
    "overlap_communication": OVERLAP,
    "overlap_comm": "DeepSpeed's overlap_comm is parallelism: overlap_communication here",
    "overlap_allgather": "a LowLevelZeroPlugin/HybridParallelPlugin argument this format does "
    "not set (Chapter 8 passes it to the training demo as --plugin_kw overlap_allgather=True)",
    "fp16": "precision lives in train: precision: fp16",
    "optimizer": "the optimizer is set by the training script",
    "lr": "did you mean 'learning_rate'?",
    "global_batch_size": "did you mean 'batch_size'? (it is the global batch)",
}
_HINTS.update(
    {
        ax: f"did you mean '{AXIS_WORDS[ax]}'? (the config spells out the axis names dp/tp/pp/sp)"
        for ax in AXES
    }
)


# YAML 1.1 forms that 1.2 reads as strings (PyYAML's resolver table, yaml/resolver.py)
_BOOL11 = re.compile(r"^(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF)$")
_NUM11 = re.compile(r"^[-+]?(?:0b[01_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*(?:\.[0-9_]*)?(?::[0-5]?[0-9])*"
                    r"(?:[eE][-+][0-9]+)?)$")  # fmt: skip


def yaml11_note(value: Any) -> str:
    """How YAML 1.1 and 1.2 readers differ on ``value`` (a string a 1.2 reader produced), as a
    clause for a message, or ''."""
    if not isinstance(value, str):
        return ""
    if _BOOL11.match(value):
        word = "true" if value.lower() in ("yes", "on") else "false"
        return (
            f"YAML 1.1 readers (PyYAML's safe_load) read {value} as {word}, YAML 1.2 readers as "
            f"the string {value!r}: write {word}"
        )
    if _NUM11.match(value) and ("_" in value or ":" in value or "0b" in value):
        try:
            number = yaml.safe_load(value)  # what YAML 1.1 makes of it
        except yaml.YAMLError:
            return ""
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            kind = "the base-60 number" if ":" in value else "the number"
            shown = f"{number:g}" if isinstance(number, float) else str(number)
            return (
                f"YAML 1.1 readers (PyYAML's safe_load) read {value} as {kind} {shown}, "
                f"YAML 1.2 readers as a string: write {shown}"
            )
    return ""


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


def _unknown_key(e: dict, raw: dict, field: str, key: str, value: Any, root) -> ConfigError:
    parent = _get(raw, e["loc"][:-1])
    section = field.rsplit(".", 1)[0] if "." in field else "config"
    model = root if section == "config" else root.model_fields[section].annotation
    valid = list(model.model_fields)
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    fix = _HINTS.get(key) or (f"did you mean '{close[0]}'?" if close else "remove it")
    if section == "config" and not close and key not in _HINTS:  # (helpers.config.loading)
        fix = "remove it, or start its name with x- to keep anchors there for merge keys"
    return fail(
        field,
        parent.get(key) if isinstance(parent, dict) else value,
        f"unknown key in {section}",
        f"{fix} (valid keys: {', '.join(valid)})",
    )


def _bad_choice(e: dict, field: str, key: str, value: Any) -> ConfigError:
    valid = [x.strip(" '") for x in e["ctx"]["expected"].replace(" or ", ",").split(",")]
    close = difflib.get_close_matches(str(value).lower(), valid, n=1, cutoff=0.3)
    hint = f"did you mean '{close[0]}'? " if close else ""
    if note := yaml11_note(value):
        hint = f"{note}; " if key != "sequence_mode" else f"{note.rsplit(':', 1)[0]}: to "
        hint += "switch sequence parallelism off remove sequence_mode; " * (key == "sequence_mode")
    if key == "precision" and "fp8" in str(value).lower():
        hint = f"{FP8}; "
    if key == "sequence_mode" and str(value).lower() in ("sequence", "1d"):
        hint = "legacy mode names do not exist any more; "
    if key == "sequence_mode" and "ulysses" in str(value).lower():
        hint = "DeepSpeed-Ulysses is all_to_all here; "
    if key == "sequence_mode" and "megatron" in str(value).lower():
        hint = "Megatron-LM's sequence parallelism is split_gather here; "
    if key == "kind" and "gpt" in str(value).lower():
        hint = (
            "GPT-2 loses its causal mask under HybridParallelPlugin without flash attention "
            "(Chapter 1); "
        )
    return fail(field, value, "not a valid choice", f"{hint}valid: {', '.join(valid)}")


def _bound(e: dict, field: str, key: str, value: Any, example: Any) -> ConfigError:
    kind = e["type"]
    bound = e["ctx"].get("ge", e["ctx"].get("gt", e["ctx"].get("le")))
    rel = {"greater_than_equal": "≥", "greater_than": ">", "less_than_equal": "≤"}[kind]
    if key == "zero_stage":
        fix = "ZeRO stages are 0 (off), 1, 2 and 3"
    elif e["loc"][0] == "parallelism":
        fix = "a degree counts processes: 1 switches the dimension off"
    elif key == "max_grad_norm":
        fix = "0 turns clipping off"
    else:
        fix = f"use a positive value, e.g. {key}: {example}"
    return fail(field, value, f"must be {rel} {bound}", fix)


def _wrong_type(kind: str, field: str, key: str, value: Any, example: Any) -> ConfigError:
    want = {"int": "a whole number", "flo": "a number", "str": "a string", "boo": "a boolean"}
    want = want.get(kind[:3], "a number")
    fix = f"write e.g. {key}: {example}"
    if (
        isinstance(value, str)
        and value.replace("e", "").replace(".", "").replace("-", "").isdigit()
    ):
        digits = int(float(value)) if float(value).is_integer() else value
        fix = f"write the digits, e.g. {key}: {digits}"
    elif isinstance(value, float) and value.is_integer() and want == "a whole number":
        n = int(value)
        fix = f"write the digits, e.g. {key}: {n} (YAML reads 1e3 or {n}.0 as a float)"
    fix = yaml11_note(value) or fix
    return fail(field, value, f"must be {want}, not {type(value).__name__}", fix)


def translate(err: ValidationError, raw: dict, root) -> ConfigError:
    """The first pydantic error of validating ``raw`` as the model ``root`` (a
    :class:`helpers.config.schema.TrainConfig`) as one ConfigError (field, value, fix); the rest
    are counted after it."""
    errors = err.errors(include_url=False)
    e = errors[0]
    ctx_error = (e.get("ctx") or {}).get("error")
    if isinstance(ctx_error, ConfigError):
        return ctx_error
    field, key = _field_of(e["loc"])
    value, kind = e.get("input"), e["type"]
    example = _EXAMPLES.get(key, 1)
    if kind == "extra_forbidden":
        msg = _unknown_key(e, raw, field, key, value, root)
    elif kind == "missing":
        msg = fail(field, "(missing)", "required", f"add it, e.g. {key}: {example}")
    elif kind == "literal_error":
        msg = _bad_choice(e, field, key, value)
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal"):
        msg = _bound(e, field, key, value, example)
    elif kind in ("model_type", "dict_type", "model_attributes_type"):
        msg = fail(
            field,
            value,
            "must be a mapping (a section of keys)",
            f"write it as '{key}:' followed by indented 'key: value' lines",
        )
    elif kind == "finite_number":
        msg = fail(
            field,
            value,
            "not a finite number (YAML reads .inf, .nan and 1e999 as floats)",
            f"write a finite value, e.g. {key}: {example}",
        )
    elif kind == "string_too_short":
        msg = fail(field, value, "must not be empty", f"name a folder, e.g. {key}: ckpt/run1")
    elif kind.startswith(("int_", "float_", "string_", "value_error")) or kind == "bool_type":
        msg = _wrong_type(kind, field, key, value, example)
    else:
        msg = fail(field, value, e["msg"], "see the chapter's table of fields")
    if len(errors) > 1:
        msg = ConfigError(
            f"{msg} (and {len(errors) - 1} more problem(s) after this one)", msg.field, msg.value
        )
    return msg
