"""Configuration: files and the one plugin builder they feed (Chapters 4 and 6).

Chapter 4: schema (the sections of a TrainConfig), loading (YAML or a dict -> TrainConfig),
yaml_reader (YAML read as YAML 1.2, with its limits), rules (the one rule table: the layout rules of
:mod:`helpers.parallel.layout_rules` and the rules only a file can break, with run_rules: the
numbers a rank would fail on and settings that cancel out), paths (the checkpoint folder),
memory_fit (Chapter 7's memory model against hardware.gpu_memory_gib), hints (pydantic's errors as
one message), plugin (TrainConfig -> plugin, the one builder), plugin_mapping (field -> constructor
argument), dry_run (validate small, then scale), legacy and legacy_reader (old config.py files).
The error every rule raises is :class:`helpers.parallel.errors.ConfigError`. Chapter 6: frameworks
(the feature table, one config in each framework), deepspeed_json, megatron_args and megatron_core
(the Megatron flags as Megatron-Core's objects).
"""
