"""Where and how ranks run (Chapter 1, "Where the ranks run").

env (inside a rank: backend, device and the placement rule), cli (every demo's command line, the GPU
guard, the plugins' lifetime), launch (torchrun from a notebook or a test), tail (torchrun's tee
output made whole lines again), failure (which rank of a failed launch failed first), shared
(launches shared within one test run), collectives (timing the four collectives, Chapter 3), groups
(the process groups Colossal-AI builds, Chapter 2), kernels (Colossal-AI's JIT kernels, Chapter 8)
and build_lock (their build lock), system_packages (the Debian packages the multi-node and browser
tests use). Several hosts on one machine are :mod:`helpers.cluster`'s.
"""
