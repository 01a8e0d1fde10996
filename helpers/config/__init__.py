"""Configuration: files, shapes and layouts, and the plugin they build (Chapters 4 and 6).

Chapter 4: schema (the sections of a TrainConfig), loading (YAML or a dict -> TrainConfig),
yaml_reader (YAML read as YAML 1.2, with its limits), rules (the one rule table, with
layout_rules: the rules Chapter 2's layouts share, rule_fixes: their messages for a file, and
run_rules: the numbers a rank would fail on and settings that cancel out), paths (the checkpoint
folder), memory_fit (Chapter 7's memory model against hardware.gpu_memory_gib), hints
(pydantic's errors as one message), errors (ConfigError, ConfigWarning), plugin
(TrainConfig -> plugin, the one builder), plugin_mapping (field -> constructor argument), dry_run
(validate small, then scale), legacy and legacy_reader (old config.py files).
Chapter 6: frameworks (the feature table, one config in three frameworks),
deepspeed_json, megatron_args, framework_choice (when to choose which). Chapter 7: layout (one
Llama under one plugin setting).
"""
