"""Configuration: files, shapes and layouts, and the plugin they build (Chapters 4 and 6).

Chapter 4: schema (the sections of a TrainConfig), loading (YAML or a dict -> TrainConfig), rules
(the one rule table, with layout_rules: the rules Chapter 2's layouts share, and rule_fixes: their
messages for a file), hints (pydantic's errors as one message), errors (ConfigError), plugin
(TrainConfig -> plugin, the one builder), plugin_mapping (field -> constructor argument), dry_run
(validate small, then scale), legacy and legacy_reader (old config.py files).
Chapter 6: frameworks (the feature table, one config in three frameworks),
deepspeed_json, megatron_args, framework_choice (when to choose which). Chapter 7: layout (one
Llama under one plugin setting).
"""
