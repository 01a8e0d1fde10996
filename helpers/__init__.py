"""Shared code of the book: everything that runs inside a rank, and the tools notebooks call.

Modules: env (backend + device), launch (torchrun runner), mesh (rank grid), results (GPU results
with provenance), tinyllama (the demos' model and data), demos/ (torchrun entry points).
"""

import logging as _logging

# bitsandbytes (imported by Colossal-AI through galore) warns through an unconfigured logger on
# every CPU import; a demo's output should be the demo's own.
_logging.getLogger("bitsandbytes").setLevel(_logging.ERROR)
