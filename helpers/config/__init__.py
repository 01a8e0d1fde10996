"""Configuration: files, shapes and layouts, and the plugin they build (Chapters 4 and 6).

schema (the validated TrainConfig), legacy (old config.py files), plugin (TrainConfig -> plugin),
layout (one Llama under one plugin setting, Chapter 7), frameworks (DeepSpeed and Megatron-LM).
"""
