"""Chapter 7's training layouts: one Llama, one Colossal-AI plugin setting, as plain data.

Used by the Chapter 7 memory demo (``helpers/demos/ch07_memory.py``), its recorder
(``helpers/record/ch07.py``) and the memory model (``helpers/cost/memory_llama.py``). A
:class:`TrainLayout` says which plugin trains the model (a Llama-style
:class:`helpers.models.shape.ModelShape`) and how (precision, ZeRO stage, tensor and pipeline
degrees, recomputation, offload); :func:`plugin_spec` turns it into the Colossal-AI constructor and
keyword arguments, checked without a GPU by binding them to the constructor's signature
(tests/test_ch07_memory.py), so a layout that could not be built is caught on the CPU.

Plugins (Colossal-AI 0.5.0, ``colossalai/booster/plugin``): ``ddp`` TorchDDPPlugin (fp32 only
here), ``hybrid`` HybridParallelPlugin (tp, pp with 1F1B, bf16 mixed precision, ZeRO 0/1),
``zero`` LowLevelZeroPlugin (ZeRO-1/2, optional CPU offload of the fp32 master shards and Adam
states), ``gemini`` GeminiPlugin (chunked ZeRO-3; ``placement`` static or auto, ``offload`` moves
the optimizer states to the CPU).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import ClassVar

from helpers.models.shape import ModelShape
from helpers.parallel.degrees import Degrees

PLUGINS = {
    "ddp": "TorchDDPPlugin",
    "hybrid": "HybridParallelPlugin",
    "zero": "LowLevelZeroPlugin",
    "gemini": "GeminiPlugin",
}


# the Llama of Chapter 7's measurements: 24 layers of width 1024 with a 32K vocabulary, about 0.37 B
# parameters, so that the model states (6–7 GB in fp32 Adam) and the activations (several GB at
# 4 × 1024 tokens) are both plainly visible on an H200, and a step takes milliseconds
CH07_SHAPE = ModelShape.llama(layers=24, hidden=1024, heads=16, kv_heads=16, vocab=32000)
CPU_SHAPE = ModelShape.llama(layers=2, hidden=64, heads=4, kv_heads=4, vocab=256)  # the gloo path
# the shape's command-line flags (ffn: default 8h/3 rounded up to 64, as helpers.models.llama)
SHAPE_FLAGS = ("layers", "hidden", "heads", "kv_heads", "vocab", "ffn")


@dataclass(frozen=True)
class TrainLayout:
    """One measured configuration; ``world`` ranks, dp = world / (tp · pp)."""

    name: str = "DDP fp32"
    plugin: str = "ddp"
    precision: str = "fp32"
    zero_stage: int = 0
    tp: int = 1
    pp: int = 1
    microbatches: int = 1  # micro-batches per step: 1F1B's (pp > 1) or accumulation (pp = 1)
    micro_batch: int = 4  # sequences per micro-batch and rank
    seq: int = 1024
    recompute: bool = False
    offload: bool = False
    placement: str = "static"  # Gemini only
    attn: str = "sdpa"
    world: int = 2
    shape: ModelShape = CH07_SHAPE
    shape_flags: ClassVar[tuple[str, ...]] = SHAPE_FLAGS  # the flags the shape travels as

    def __post_init__(self):
        if self.plugin not in PLUGINS:
            raise ValueError(f"unknown plugin {self.plugin!r}; valid: {sorted(PLUGINS)}")
        if self.world % (self.tp * self.pp):
            raise ValueError(f"tp·pp = {self.tp * self.pp} does not divide world = {self.world}")
        if self.plugin == "ddp" and (
            self.precision != "fp32" or self.tp * self.pp > 1 or self.offload
        ):
            raise ValueError("TorchDDPPlugin layouts here are fp32 data parallel only")
        if self.plugin == "zero" and self.zero_stage not in (1, 2):
            raise ValueError("LowLevelZeroPlugin needs zero_stage 1 or 2")
        if self.plugin != "hybrid" and self.tp * self.pp > 1:
            raise ValueError(
                f"{PLUGINS[self.plugin]} has no tensor/pipeline axis here: use 'hybrid'"
            )
        if self.pp > 1 and self.microbatches < self.pp:
            raise ValueError(f"1F1B with pp={self.pp} needs at least {self.pp} micro-batches")

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp)

    @property
    def degrees(self) -> Degrees:
        """D × T × P as :class:`helpers.parallel.degrees.Degrees`."""
        return Degrees(self.dp, self.tp, self.pp)

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step over all data-parallel ranks."""
        return self.micro_batch * self.dp * self.microbatches

    def to_args(self) -> list[str]:
        """Command-line flags of the demo for this layout (the shape travels as its own flags)."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "shape":
                out += [x for k in SHAPE_FLAGS for x in (f"--{k}", str(getattr(value, k)))]
            elif isinstance(value, bool):
                out += [f"--{f.name}"] if value else []
            else:
                out += [f"--{f.name}", str(value)]
        return out

    @classmethod
    def from_namespace(cls, ns: argparse.Namespace) -> "TrainLayout":
        shape = ModelShape.llama(**{k: getattr(ns, k) for k in SHAPE_FLAGS})
        return cls(
            **{f.name: getattr(ns, f.name) for f in fields(cls) if f.name != "shape"}, shape=shape
        )

    @classmethod
    def from_dict(cls, d: dict) -> "TrainLayout":
        d = dict(d)
        shape = d.get("shape", CH07_SHAPE)  # a dict: a recorded layout (ffn absent in old records)
        d["shape"] = ModelShape.llama(**shape) if isinstance(shape, dict) else shape
        return cls(**d)


def plugin_spec(layout: TrainLayout) -> tuple[str, dict]:
    """(Colossal-AI plugin class name, constructor kwargs) for ``layout``.

    Defaults that matter for memory, read in colossalai 0.5.0: LowLevelZeroPlugin
    ``reduce_bucket_size_in_m=12`` and ``overlap_communication=True``; GeminiPlugin
    ``shard_param_frac=1.0`` (static: parameters sharded like ZeRO-3); max_norm 0 (no clipping).
    """
    if layout.plugin == "ddp":
        return PLUGINS["ddp"], {}
    if layout.plugin == "zero":
        return PLUGINS["zero"], dict(
            stage=layout.zero_stage, precision=layout.precision, cpu_offload=layout.offload
        )
    if layout.plugin == "gemini":
        kwargs = dict(precision=layout.precision, placement_policy=layout.placement)
        if layout.offload:
            if layout.placement != "static":
                raise ValueError("offload here means static placement with offload_optim_frac=1.0")
            kwargs["offload_optim_frac"] = 1.0
        return PLUGINS["gemini"], kwargs
    kwargs = dict(
        **layout.degrees.colossalai(),  # tp_size, pp_size
        precision=layout.precision,
        zero_stage=layout.zero_stage,
        max_norm=0.0,
    )
    if layout.pp > 1:
        kwargs.update(num_microbatches=layout.microbatches, pp_style="1f1b")
    return PLUGINS["hybrid"], kwargs
