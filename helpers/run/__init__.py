"""Where and how ranks run (Chapter 1, "Where the ranks run").

env (inside a rank: backend, device and the placement rule), launch (torchrun from a notebook or
a test), kernels (Colossal-AI's JIT kernels and their build lock, Chapter 8), gpu_suite (``make
test-gpu`` and its record).
"""
