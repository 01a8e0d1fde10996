"""The book's vocabulary, defined once: mesh axes, sequence-parallel modes, precisions, plugins.

Chapter 1 names the four dimensions; Chapter 2, "Where sequence parallelism fits", sorts the
sequence-parallel modes by whether they reuse the tensor group; Chapter 4 lists the precisions and
plugins a config file may name. Every module, argparse ``choices=`` and pydantic ``Literal`` takes
its words from here.
"""

from typing import Literal, get_args

Axis = Literal["dp", "pp", "tp", "sp"]
# the rank grid's order, outermost first (helpers.parallel.mesh)
AXES: tuple[str, ...] = get_args(Axis)
AXIS_WORDS = {"dp": "data", "tp": "tensor", "pp": "pipeline", "sp": "sequence", "ep": "expert"}

SpMode = Literal["split_gather", "ring", "all_to_all", "ring_attn"]
SP_MODES: tuple[str, ...] = get_args(SpMode)
SHARED_SP_MODES = ("split_gather", "ring")  # reuse the tp group: S = T, no axis of their own
OWN_AXIS_SP_MODES = ("all_to_all", "ring_attn")  # an sp axis of their own, counted in G

Precision = Literal["fp32", "fp16", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
HALF_PRECISIONS = ("fp16", "bf16")

Plugin = Literal["torch_ddp", "low_level_zero", "gemini", "hybrid_parallel", "moe_hybrid_parallel"]
PLUGINS: tuple[str, ...] = get_args(Plugin)
# The Colossal-AI class of each plugin word (colossalai/booster/plugin/__init__.py).
CLASS_NAMES = {
    "torch_ddp": "TorchDDPPlugin",
    "low_level_zero": "LowLevelZeroPlugin",
    "gemini": "GeminiPlugin",
    "hybrid_parallel": "HybridParallelPlugin",
    "moe_hybrid_parallel": "MoeHybridParallelPlugin",
}
assert tuple(CLASS_NAMES) == PLUGINS, "one class name per plugin word"


def __getattr__(name: str):
    """``DTYPES``: the torch dtype of each precision word (Chapter 1's mixed-precision reference).

    Built on first use, so that validating a config never imports torch.
    """
    if name == "DTYPES":
        import torch

        globals()["DTYPES"] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
        return globals()["DTYPES"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
