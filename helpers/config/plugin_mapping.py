"""Chapter 4's mapping table ("From the file to the plugin"): which config field becomes which
plugin constructor argument.

One column per plugin that a book config can choose (:func:`helpers.config.plugin.plugin_spec`);
every name in a cell that is followed by '=' is a keyword argument of that plugin's Colossal-AI
0.5.0 constructor (tests check each one against ``inspect.signature``).
"""

from __future__ import annotations

from helpers.parallel.vocab import CLASS_NAMES, PLUGINS

MAPPING_PLUGINS = tuple(CLASS_NAMES[w] for w in PLUGINS[:4])  # the MoE plugin takes no config

# (config field, TorchDDPPlugin, LowLevelZeroPlugin, GeminiPlugin, HybridParallelPlugin)
MAPPING = [
    ("parallelism.data", "world ÷ 1", "world ÷ 1", "world ÷ tp_size", "world ÷ (tp·pp·sp)"),
    ("parallelism.tensor", "must be 1", "must be 1", "tp_size=", "tp_size="),
    ("parallelism.pipeline", "must be 1", "must be 1", "must be 1", "pp_size="),
    (
        "parallelism.sequence",
        "must be 1",
        "must be 1",
        "must be 1",
        "sp_size= (all_to_all, ring_attn)",
    ),
    (
        "parallelism.sequence_mode",
        "—",
        "—",
        "—",
        "enable_sequence_parallelism=, sequence_parallelism_mode=",
    ),
    ("parallelism.zero_stage", "0", "stage= (1, 2)", "3 (always)", "zero_stage= (0, 1, 2)"),
    ("parallelism.microbatches", "—", "—", "—", "num_microbatches="),
    (
        "parallelism.overlap_communication",
        "— (DDP always overlaps)",
        "overlap_communication=",
        "—",
        "overlap_communication= (ZeRO 1, 2)",
    ),
    (
        "train.micro_batch_size",
        "loader batch",
        "loader batch",
        "loader batch",
        "microbatch_size= (if no microbatches)",
    ),
    (
        "train.precision",
        "Booster(mixed_precision=) fp16",
        "precision=",
        "precision= (fp16, bf16)",
        "precision=",
    ),
    ("train.max_grad_norm", "clip in the loop", "max_norm=", "max_norm=", "max_norm="),
    (
        "train.batch_size",
        "÷ data = loader batch",
        "÷ data",
        "÷ data",
        "÷ data = microbatches × micro-batch",
    ),
    ("train.learning_rate, seed", "optimizer, torch.manual_seed", "same", "same", "same"),
    (
        "train.save_interval, checkpoint_dir",
        "booster.save_model / save_optimizer",
        "same",
        "same",
        "same",
    ),
    ("model.*", "LlamaConfig (helpers.models.llama)", "same", "same", "same"),
]


def mapping_rows() -> list[dict]:
    """MAPPING as rows for :func:`helpers.notebook.tables.show_table`."""
    return [dict(zip(("config", *MAPPING_PLUGINS), row)) for row in MAPPING]
