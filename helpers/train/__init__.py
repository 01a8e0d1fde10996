"""Training machinery (Chapters 1, 3, 5 and 6-9): what the demos in ``helpers/demos`` call.

Checking and references: reference (single-process references a demo checks itself against, and
whether a run's losses count),
grid3d (Chapter 2's D × P × T grid), flat_buffer (Chapter 7's ZeRO-1 storage), moe_check and
ce_check (Chapter 9's expert-parallel and cross-entropy checks).

Training through a plugin: plugin_step (Chapter 1's Booster runs, Chapter 3's measured layouts),
layout_step (Chapter 7's layouts step by step), framework_run (FSDP2 or a plugin, Chapters 6 and
8), presets (Chapter 9's Llama shapes and MFU), benchmark (Chapter 9's hybrid benchmark),
seq_sweep (its sequence-length sweep), moe_plugin (Mixtral under MoeHybridParallelPlugin),
resnet (the ResNet quick demo), share and share_cases (the communication share of a step).

Chapter 5's entry point: run_config (flags and config), loop (the training loop), checkpoint
(resumable Booster checkpoints), atomic (directories that appear whole), weights (comparing two
runs' weights). Measuring and failing: signals (throughput, memory, communication wait), speed
(the tuning knobs), decoder (a wrapped Llama's decoder layers, compiled one by one), fused_proj,
levers, linear_ce and fp8 (Chapter 8's flagship levers: fused linear
cross-entropy, FP8 matmuls), profiling (compute versus communication), trace (one step's per-rank
compute, communication and idle intervals, Chapter 2), memory_snapshot (the allocator's trace by
category, Chapter 8), faults (deliberate failures), elastic_job (the tiny job of Chapter 8's node
faults and Chapter 5's elastic restart, with its one-process reference),
diagnose (a failed log -> cause and fix), labs and kernel_lock_lab (the failure labs).
"""
