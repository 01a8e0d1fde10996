"""The dimensions of parallel training, each in its own module (Chapters 1, 2 and 7).

vocab (the words: axes, sequence-parallel modes, precisions, plugins), factors (divisors),
mesh (the rank grid and its groups), layouts (how G GPUs factor into D x T x P x S), tp
(Megatron-LM's f and g), pp (pipeline stages and the GPipe bubble), sp (Ulysses all-to-all),
ep (mixture of experts), zero (ZeRO-1 bookkeeping), fsdp2 (PyTorch's fully_shard).
"""
