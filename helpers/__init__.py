"""Shared code of the book, laid out like the book. Notebooks import from the subpackages below.

- ``helpers.parallel``: the dimensions themselves (Chapters 1-2): the rank grid, layouts, data,
  tensor, pipeline, sequence and expert parallelism, ZeRO and FSDP2.
- ``helpers.cost``: what a layout costs (Chapters 3, 7 and 12): communication, memory, MFU, planner,
  the hardware of published trainings.
- ``helpers.config``: configuration files and the one plugin builder (Chapters 4 and 6).
- ``helpers.train``: training machinery (Chapters 5 and 8): references, checkpoints, signals,
  tuning knobs, profiling, deliberate failures and their diagnosis.
- ``helpers.models``: the models and data the demos train (a tiny Llama, ResNet, images).
- ``helpers.run``: where and how ranks run: the environment inside a rank, the torchrun launcher,
  Colossal-AI's kernels, the GPU test suite (Chapter 1, "Where the ranks run").
- ``helpers.record``: GPU measurements with provenance under ``results/<hardware>/``.
- ``helpers.chapters``: the glue each notebook calls, named like the notebooks.
- ``helpers.notebook``: plots, widgets, stored outputs, machine-dependent numbers.
- ``helpers.demos``: torchrun entry points only; nothing imports a demo.
"""

import logging as _logging

# bitsandbytes (imported by Colossal-AI through galore) warns through an unconfigured logger on
# every CPU import; a demo's output should be the demo's own.
_logging.getLogger("bitsandbytes").setLevel(_logging.ERROR)
