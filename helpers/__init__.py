"""Shared code of the book: everything that runs inside a rank, and the tools notebooks call.

Modules: env (backend + device, and the launcher's one placement rule, Chapter 1 "Where the ranks
run"), launch (torchrun runner), live (each notebook's table of where its runs happen), measured
(CPU-dependent values shown with "≈" and asserted), kernels (Colossal-AI's JIT kernels and their
build lock, Chapter 8), mesh (rank grid), results (GPU results with provenance), gpu_suite (the
record of ``make test-gpu``), tinyllama (the demos' model and data), demos/ (torchrun entry points).
"""

import logging as _logging

# bitsandbytes (imported by Colossal-AI through galore) warns through an unconfigured logger on
# every CPU import; a demo's output should be the demo's own.
_logging.getLogger("bitsandbytes").setLevel(_logging.ERROR)
