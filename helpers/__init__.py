"""Shared code of the book, laid out like the book. Notebooks import from the subpackages below.

Layers, lowest first: models < parallel < cost < config < run < train < cluster < record < demos <
figures < notebook < chapters. A module imports its own layer and the layers below it, never one
above, and no modules import each other in a circle (``tests/test_layers.py`` reads every import,
function-local ones included). A function-local import of a helpers module is there only to defer
a heavy dependency that module loads (torch, which a config file loads without; Colossal-AI,
DeepSpeed, Megatron-Core, Transformers), and its line says so.

- ``helpers.models``: the models and data the demos train (a tiny Llama, ResNet, images), and the
  shape of a model (:mod:`helpers.models.shape`).
- ``helpers.parallel``: the dimensions themselves (Chapters 1-2): the degrees, the rank grid,
  layouts and the rules they share, data, tensor, pipeline, sequence and expert parallelism, ZeRO
  and FSDP2.
- ``helpers.cost``: what a layout costs (Chapters 3, 7 and 12): communication, memory, MFU,
  planner, the hardware of published trainings.
- ``helpers.config``: configuration files and the one plugin builder (Chapters 4 and 6); a file's
  layout is checked against the memory model of ``cost``.
- ``helpers.run``: where and how ranks run: the environment inside a rank, the torchrun launcher,
  Colossal-AI's kernels (Chapter 1, "Where the ranks run"), and what each demo's ``RESULT`` line
  holds: one TypedDict per result in ``helpers.run.result_types``, a module per chapter, that the
  demo passes to ``emit`` (which checks the keys) and its readers annotate what they read with
  (``tests/test_result_types.py`` checks their keys).
- ``helpers.train``: training machinery (Chapters 5 and 8): references, checkpoints, signals,
  tuning knobs, profiling, deliberate failures and their diagnosis.
- ``helpers.cluster``: hosts made on one machine (network namespaces), SSH, SLURM, node faults
  and the multi-node runs of Chapters 5 and 8.
- ``helpers.record``: GPU measurements with provenance under ``results/<hardware>/``.
- ``helpers.demos``: torchrun entry points only; nothing imports a demo.
- ``helpers.figures``: the book's concept figures and their shared style.
- ``helpers.notebook``: tables, widgets, stored outputs, machine-dependent numbers.
- ``helpers.chapters``: the glue each notebook calls, named like the notebooks.
"""

import logging as _logging

# bitsandbytes (imported by Colossal-AI through galore) warns through an unconfigured logger on
# every CPU import; a demo's output should be the demo's own.
_logging.getLogger("bitsandbytes").setLevel(_logging.ERROR)
