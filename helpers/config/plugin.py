"""From a validated :class:`~helpers.config.schema.TrainConfig` to what runs: the Colossal-AI
plugin, its keyword arguments and the one builder every rank calls.

Used by Chapter 4 (which plugin a config gets) and Chapter 5's training entry point
(:func:`build_plugin`). Only keyword arguments that the Colossal-AI 0.5.0 constructors accept are
emitted (tests bind every generated dict to ``inspect.signature``).

Which plugin (Colossal-AI 0.5.0, ``colossalai/booster/plugin/``):

* ZeRO-3 → ``GeminiPlugin`` (chunk-based parameter sharding; fp16/bf16 only);
* only data parallelism (tensor = pipeline = 1, no sequence split):
  ZeRO-1/2 → ``LowLevelZeroPlugin(stage=…)``; ZeRO-0 fp32/fp16 → ``TorchDDPPlugin`` (fp16 through
  ``Booster(mixed_precision="fp16")``, torch AMP); ZeRO-0 bf16 → ``HybridParallelPlugin(tp_size=1,
  pp_size=1, precision="bf16")``, because ``Booster(mixed_precision="bf16")`` fails in 0.5.0
  (``BF16MixedPrecision`` is abstract: "Can't instantiate abstract class");
* anything with tensor, pipeline or sequence parallelism → ``HybridParallelPlugin``.

A layout that names its plugin itself (Chapter 7's) gets the same :class:`PluginSpec` from
``plugin_spec(name, **kwargs)``.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field

from helpers.config.schema import TrainConfig
from helpers.parallel.degrees import COLOSSALAI
from helpers.parallel.vocab import CLASS_NAMES, PLUGINS


CPU_ONLY_DP = (
    "Colossal-AI 0.5.0 runs only data parallelism (TorchDDPPlugin, fp32) on the CPU: "
    "HybridParallelPlugin's tensor/pipeline/sequence axes fail there "
    "(colossalai/accelerator/cpu_accelerator.py:106 passes a device to torch.get_rng_state, "
    "then torch.cuda calls), ZeRO needs a "
    "device and fp16/bf16 mixed precision needs CUDA. Run this config on a machine with {need} "
    "CUDA GPUs, or on the CPU set tensor, pipeline and sequence to 1, zero_stage to 0 and "
    "precision to fp32."
)


@dataclass(frozen=True)
class PluginSpec:
    """A plugin class name, its constructor kwargs, the Booster's kwargs and why it was chosen."""

    plugin: str
    kwargs: dict
    booster_kwargs: dict = field(default_factory=dict)
    why: str = ""
    notes: tuple[str, ...] = ()

    def call(self) -> str:
        """The constructor call as Python source, e.g.
        ``HybridParallelPlugin(tp_size=2, pp_size=1)``."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.plugin}({args})"


def class_name(name: str) -> str:
    """The Colossal-AI class for a plugin word (``"gemini"``) or class name (``"GeminiPlugin"``)."""
    if name in CLASS_NAMES.values():
        return name
    if name not in CLASS_NAMES:
        raise ValueError(f"unknown plugin {name!r}; one of {PLUGINS} or their classes")
    return CLASS_NAMES[name]


def plugin_class(name: str):
    """The Colossal-AI plugin class called ``name`` (imports Colossal-AI)."""
    name = class_name(name)
    with warnings.catch_warnings():  # optional-kernel notices (apex, tensornvme) on import
        warnings.simplefilter("ignore")
        from colossalai.booster import plugin as plugins

    return getattr(plugins, name)


def plugin_spec(source: TrainConfig | str, /, **kwargs) -> PluginSpec:
    """The plugin and the kwargs it is constructed with.

    ``source`` is a validated TrainConfig, whose plugin follows from the rules in the module
    docstring (Chapter 4), or a plugin named directly, a word of
    :data:`helpers.parallel.vocab.PLUGINS` or its class name, with the constructor ``kwargs``
    given as keywords (Chapter 7's layouts, which pick their plugin themselves).
    """
    if isinstance(source, str):
        return PluginSpec(class_name(source), dict(kwargs))
    if kwargs:
        raise TypeError(f"a TrainConfig brings its own plugin kwargs, got {sorted(kwargs)}")
    return _config_spec(source)


def _config_spec(cfg: TrainConfig) -> PluginSpec:
    p, t = cfg.parallelism, cfg.train
    extra = {"max_norm": t.max_grad_norm} if t.max_grad_norm else {}
    if p.overlap_communication is not None:  # the rules allow it only where the plugin takes it
        extra["overlap_communication"] = p.overlap_communication
    if p.zero_stage == 3:
        kwargs = {
            "precision": t.precision,
            **({COLOSSALAI["tensor"]: p.tensor} if p.tensor > 1 else {}),
            **extra,
        }
        return PluginSpec(
            "GeminiPlugin",
            kwargs,
            why="zero_stage 3: Gemini shards parameters, gradients and optimizer states in chunks",
        )
    if p.model_parallel == 1 and p.zero_stage in (1, 2):
        return PluginSpec(
            "LowLevelZeroPlugin",
            {"stage": p.zero_stage, "precision": t.precision, **extra},
            why=f"data parallelism only, ZeRO-{p.zero_stage}",
        )
    if p.model_parallel == 1 and t.precision != "bf16":
        notes = (
            (
                "max_grad_norm: TorchDDPPlugin does not clip; call optimizer.clip_grad_by_norm("
                f"{t.max_grad_norm}) before optimizer.step()",
            )
            if t.max_grad_norm
            else ()
        )
        booster = {"mixed_precision": "fp16"} if t.precision == "fp16" else {}
        return PluginSpec(
            "TorchDDPPlugin",
            {},
            booster,
            why="data parallelism only, no ZeRO: PyTorch DDP"
            + (", fp16 through torch AMP" if booster else ""),
            notes=notes,
        )
    degrees = cfg.degrees.colossalai()  # tp_size, pp_size, then the sequence's (one rename table)
    kwargs = {k: degrees.pop(k) for k in list(degrees)[:2]}
    kwargs |= {"precision": t.precision, "zero_stage": p.zero_stage} | degrees
    if p.pipeline > 1:
        if p.microbatches:
            kwargs["num_microbatches"] = p.microbatches
        else:
            kwargs["microbatch_size"] = t.micro_batch_size
    kwargs.update(extra)
    notes = (
        ("ring_attn turns on flash attention: it needs the flash-attn package and GPUs",)
        if p.sequence_mode == "ring_attn"
        else ()
    )
    why = (
        (
            "bf16 without ZeRO: Booster(mixed_precision='bf16') fails in Colossal-AI 0.5.0, "
            "the hybrid plugin with tp = pp = 1 runs DDP in bf16"
        )
        if p.model_parallel == 1
        else "tensor, pipeline or sequence parallelism: shardformer + the hybrid mesh "
        "(dp, pp, tp, sp)"
    )
    return PluginSpec("HybridParallelPlugin", kwargs, why=why, notes=notes)


def check_signature(spec: PluginSpec) -> None:
    """Raise TypeError if the plugin's constructor does not accept ``spec.kwargs``."""
    inspect.signature(plugin_class(spec.plugin)).bind(**spec.kwargs)


def _refuse_on_cpu(cfg: TrainConfig, spec: PluginSpec) -> None:
    """On the CPU only TorchDDPPlugin in fp32 runs: say why and what to change, before
    Colossal-AI fails somewhere deep inside a rank."""
    if spec.plugin == "TorchDDPPlugin" and not spec.booster_kwargs.get("mixed_precision"):
        return
    p = cfg.parallelism
    layout = (
        f"tensor={p.tensor}, pipeline={p.pipeline}, sequence={p.sequence}, "
        f"zero_stage={p.zero_stage}, "
        f"precision={cfg.train.precision} -> {spec.plugin}"
    )
    raise RuntimeError(
        f"this config ({layout}) needs GPUs. " + CPU_ONLY_DP.format(need=cfg.world_size())
    )


def build_plugin(cfg: TrainConfig, device=None, bucket_cap_mb: float | None = None):
    """(plugin, booster, spec) for ``cfg``; call inside an initialised process group (torchrun).

    ``device`` is the rank's ``torch.device``: on a CPU anything but TorchDDPPlugin in fp32 raises
    a RuntimeError that says why and what to change (``None``: no check). ``bucket_cap_mb`` sets
    DDP's gradient bucket size (torch's default, 25 MB, holds the whole tiny model in one bucket).
    Keep a reference to the plugin while training: its ``__del__`` destroys its process groups.
    """
    spec = plugin_spec(cfg)
    if device is not None and device.type != "cuda":
        _refuse_on_cpu(cfg, spec)
    kwargs = dict(spec.kwargs)
    if spec.plugin == "TorchDDPPlugin" and bucket_cap_mb is not None:
        kwargs["bucket_cap_mb"] = bucket_cap_mb
    plugin = plugin_class(spec.plugin)(**kwargs)
    from colossalai.booster import Booster

    return plugin, Booster(plugin=plugin, **spec.booster_kwargs), spec
