"""The dimensions of parallel training, each in its own module (Chapters 1, 2 and 7).

vocab (the words: axes, sequence-parallel modes, precisions, plugins and their Colossal-AI classes),
degrees (D, T, P, S and E as one type, their flags and Colossal-AI names),
factors (divisors), mesh (the rank grid and its groups), layouts (how G GPUs factor into D x T x P x
S), case, layout_rules and rule_fixes (what the rules of a layout look at, the rules, their
messages; errors: the one error they and a config file raise), train_layout (Chapter 7's layouts:
one Llama under one plugin setting), tp (Megatron-LM's f and g), pp (pipeline stages and the GPipe
bubble), pp_schedules and pp_runtime (GPipe, 1F1B, interleaved 1F1B and zero-bubble schedules, run
and timed, Chapter 1), sp (Ulysses all-to-all), cp (ring attention, Chapter 9), ep (mixture of
experts), zero (ZeRO-1 bookkeeping), fsdp2 (PyTorch's fully_shard), device_mesh (torch's DeviceMesh
beside ProcessGroupMesh, Chapter 2).
"""
