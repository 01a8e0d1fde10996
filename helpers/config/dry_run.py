"""Chapter 4, "Validate small, then scale": a configuration shrunk to what a few processes or a
CPU can run, and the fields it changed.

:func:`scaled_down` keeps every dimension it can and every divisibility rule of
:mod:`helpers.config.rules`; :func:`side_by_side` lists what differs from the full run, including
the plugin each one gets (:func:`helpers.config.plugin.plugin_spec`). Chapter 5's recorder runs the
result on two processes.
"""

from __future__ import annotations

import math
import warnings

from helpers.parallel.errors import ConfigWarning
from helpers.config.loading import load_config
from helpers.config.plugin import plugin_spec
from helpers.config.schema import TrainConfig
from helpers.parallel.vocab import OWN_AXIS_SP_MODES, SHARED_SP_MODES

_SHRINK_ORDER = ("data", "sequence", "pipeline", "tensor")  # dropped first → last


def _smaller(d: int) -> int:
    """The next smaller degree: the largest proper divisor (8 → 4, 6 → 3, 3 → 1)."""
    return max(k for k in range(1, d) if d % k == 0)


def scaled_down(cfg: TrainConfig, max_procs: int, steps: int = 1) -> TrainConfig:
    """The source guide's "validate small, then scale": ``cfg`` with every degree made smaller
    until the layout fits ``max_procs`` processes, and a tiny model of the same kind.

    Degrees first shrink one size at a time (largest degree first, to a divisor of the original,
    so every divisibility rule still holds) while they stay above 1; only when that is not enough
    are dimensions switched off, data first and tensor last, so the dry run exercises as many of
    the original dimensions as ``max_procs`` allows. The model keeps its kind and its attention
    type (grouped-query or not) at a size a CPU runs in seconds; the batch is the smallest that
    feeds every stage; the run is ``steps`` steps and saves a checkpoint after each one. ZeRO
    over a data degree shrunk to 1 shards nothing; the dry run keeps it to exercise its code, so
    that :class:`~helpers.parallel.errors.ConfigWarning` is not issued here.
    """
    if isinstance(max_procs, bool) or not isinstance(max_procs, int) or max_procs < 1:
        raise ValueError(f"max_procs must be a whole number, at least 1, got {max_procs!r}")
    p, t, m = cfg.parallelism, cfg.train, cfg.model
    mode = p.sequence_mode
    deg = {
        "data": p.data if isinstance(p.data, int) else max_procs,
        "tensor": p.tensor,
        "pipeline": p.pipeline,
        "sequence": p.sp_in_world,
    }

    def size() -> int:
        return math.prod(deg.values())

    # [start: shrink]
    while size() > max_procs and max(deg.values()) > 2:
        name = max(_SHRINK_ORDER, key=lambda k: deg[k])  # ties: the earlier in _SHRINK_ORDER
        deg[name] = _smaller(deg[name])
    for name in _SHRINK_ORDER:
        while size() > max_procs and deg[name] > 1:
            deg[name] = _smaller(deg[name])
    # [end: shrink]
    tp, pp, sp = deg["tensor"], deg["pipeline"], deg["sequence"]
    if mode in SHARED_SP_MODES and tp == 1 or mode in OWN_AXIS_SP_MODES and sp == 1:
        mode = None
    group = 2 if m.kv < m.heads else 1  # keep grouped-query attention if the model had it
    unit = tp * (sp if mode in OWN_AXIS_SP_MODES else 1)
    kv = max(2, unit) if group > 1 else None
    heads = kv * group if kv else max(4, unit)
    split = {"all_to_all": sp, "ring_attn": 2 * sp, "split_gather": tp, "ring": tp}.get(
        mode or "", 1
    )
    micro = 2 * pp if pp > 1 else None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "parallelism.zero_stage", ConfigWarning)
        return load_config(
            {
                "parallelism": {
                    "data": deg["data"],
                    "tensor": tp,
                    "pipeline": pp,
                    "sequence": sp if mode in OWN_AXIS_SP_MODES else 1,
                    "sequence_mode": mode,
                    "zero_stage": p.zero_stage,
                    "microbatches": micro,
                },
                "train": {
                    **t.model_dump(),
                    "batch_size": deg["data"] * 2 * (micro or 1),
                    "micro_batch_size": 2,
                    "steps": steps,
                    "save_interval": 1,
                    "checkpoint_dir": f"{t.checkpoint_dir}-dry-run",
                },
                "model": {
                    "kind": m.kind,
                    "layers": 2 * pp,
                    "hidden": 16 * heads,
                    "heads": heads,
                    "kv_heads": kv,
                    "vocab": 128,
                    "seq_len": split * math.ceil(32 / split),
                },
            }
        )


def side_by_side(full: TrainConfig, small: TrainConfig, procs: int | None = None) -> list[dict]:
    """Rows 'field | full | dry run' for every field that differs, plus world size and plugin."""
    a, b = _flat(full.to_dict()), _flat(small.to_dict())
    rows = [{"field": k, "full": a[k], "dry run": b.get(k)} for k in a if a[k] != b.get(k)]
    world = full.world_size(procs) if full.data_degree or procs else "auto"
    rows.append({"field": "world size", "full": world, "dry run": small.world_size()})
    rows.append(
        {"field": "plugin", "full": plugin_spec(full).plugin, "dry run": plugin_spec(small).plugin}
    )
    return rows


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out
