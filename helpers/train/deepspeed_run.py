"""Chapter 6: DeepSpeed's ZeRO stages trained from the JSON the book's converter writes.

One book config (a Colossal-AI YAML, Chapter 4's :class:`helpers.config.schema.TrainConfig`)
becomes a DeepSpeed JSON file (:func:`helpers.config.deepspeed_json.to_deepspeed`), and
``deepspeed.initialize`` reads that file: the converter's output is executed, not only printed.
Each run of :data:`RUNS` trains the same tiny Llama on the same global batches from the same
initial weights (:func:`train_stage`), and :func:`held` then reads what the rank keeps:
parameters materialised between steps, ZeRO-3's own partition of them, Adam's state. Every
collective DeepSpeed calls is counted on its way to ``torch.distributed``
(:class:`CommCounter`).

Where DeepSpeed lives (:func:`import_deepspeed`): ``make venv`` installs it beside the venv's
site-packages, in ``<venv>/deepspeed``, because transformers 4.51.3 imports DeepSpeed in every
process that loads its models once it can find it (``transformers/modeling_utils.py``: ``if
is_deepspeed_available(): import deepspeed``), which would cost every rank of every other chapter
about 0.4 s and print DeepSpeed's "Setting accelerator to CPU" line. Only the ranks that train
with DeepSpeed put that folder on ``sys.path``; on a machine where DeepSpeed is installed the
usual way (the GPU kit), the installed one is used.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import logging
import os
import sys
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.config.deepspeed_json import to_deepspeed
from helpers.config.schema import TrainConfig
from helpers.models.llama import build_llama, shard_batch, token_batch
from helpers.models.shape import ModelShape
from helpers.train.reference import train_reference

DS_HOME = Path(sys.prefix) / "deepspeed"  # where `make venv` puts it (README, "DeepSpeed")
# (name, ZeRO stage, keys added to the converter's zero_optimization): the converter's JSON as it
# is for stages 1-3, then ZeRO-3 once more with DeepSpeed's persistence threshold at 0. Its
# default, 100,000 elements (deepspeed/runtime/zero/config.py, stage3_param_persistence_threshold),
# keeps every smaller parameter whole on every rank; the tiny Llama's largest has 16,384.
RUNS = [
    ("ZeRO-1", 1, {}),
    ("ZeRO-2", 2, {}),
    ("ZeRO-3", 3, {}),
    ("ZeRO-3, persistence threshold 0", 3, {"stage3_param_persistence_threshold": 0}),
]
TOLERANCE = 1e-5  # |mean of the ranks' losses - single-process reference|, fp32 on the CPU
# the collectives counted, and where each finds its input tensor: (position, keyword)
COUNTED = {
    "all_reduce": (0, "tensor"),
    "reduce": (0, "tensor"),
    "broadcast": (0, "tensor"),
    "all_gather": (1, "tensor"),
    "all_gather_into_tensor": (1, "input_tensor"),
    "reduce_scatter": (1, "input_list"),
    "reduce_scatter_tensor": (1, "input"),
}


def import_deepspeed(cpu: bool):
    """``deepspeed``, from ``<venv>/deepspeed`` where it is not installed the usual way; quiet
    (its logger at WARNING). On the CPU (``cpu``): DeepSpeed's CPU accelerator, whose
    communication backend is gloo when oneCCL's bindings are absent
    (``deepspeed/accelerator/cpu_accelerator.py``), and its shared-memory all-reduce kernel left
    unbuilt: it serves only inference's all-reduce (``deepspeed/comm/torch.py``,
    ``build_shm_op``), and building it is a C++ compilation on every fresh machine."""
    if importlib.util.find_spec("deepspeed") is None:
        if not DS_HOME.is_dir():
            raise ModuleNotFoundError(
                f"DeepSpeed is not installed: `make venv` puts it in {DS_HOME} (README, DeepSpeed)"
            )
        sys.path.insert(0, str(DS_HOME))
    if cpu:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    if cpu:
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    return deepspeed


def _numel(name: str, args: tuple, kwargs: dict) -> int:
    position, keyword = COUNTED[name]
    t = kwargs.get(keyword, args[position] if len(args) > position else None)
    if isinstance(t, (list, tuple)):
        return sum(x.numel() for x in t)
    return t.numel() if torch.is_tensor(t) else 0


class CommCounter:
    """Counts the calls of :data:`COUNTED` and the elements they send, inside :meth:`window`.

    :meth:`install` must run before ``deepspeed.init_distributed``: DeepSpeed's communication
    layer keeps the functions it finds in ``torch.distributed`` then (``deepspeed/comm/torch.py``,
    ``get_all_gather_function``)."""

    def __init__(self):
        self.calls, self.elements, self.on = Counter(), Counter(), False

    def install(self) -> None:
        for name in COUNTED:
            setattr(dist, name, self._wrap(name, getattr(dist, name)))

    def _wrap(self, name, fn):
        @functools.wraps(fn)
        def counted(*args, **kwargs):
            if self.on:
                self.calls[name] += 1
                self.elements[name] += _numel(name, args, kwargs)
            return fn(*args, **kwargs)

        return counted

    @contextmanager
    def window(self):
        self.calls.clear()
        self.elements.clear()
        self.on = True
        try:
            yield self
        finally:
            self.on = False


def stage_config(cfg: TrainConfig, stage: int, extra: dict, folder: Path) -> tuple[Path, str]:
    """The converter's DeepSpeed JSON for ``cfg`` at ZeRO ``stage`` (plus ``extra`` ZeRO keys),
    written to ``folder`` as a file DeepSpeed reads; and what the book's schema says of the YAML
    at that stage ('' when it accepts it). The schema's rules are Colossal-AI's: it refuses
    ZeRO-3 in fp32, which Gemini cannot train and DeepSpeed can, so that config is converted as
    it stands and the refusal is reported."""
    from pydantic import ValidationError

    raw = cfg.model_dump()
    raw["parallelism"]["zero_stage"] = stage
    try:
        staged, refused = type(cfg).model_validate(raw), ""  # the book's checks again
    except ValidationError as e:
        refused = e.errors()[0]["msg"].removeprefix("Value error, ")
        staged = cfg.model_copy(
            update={"parallelism": cfg.parallelism.model_copy(update={"zero_stage": stage})}
        )
    ds, _ = to_deepspeed(staged)
    ds["zero_optimization"].update(extra)
    path = folder / f"ds_zero{stage}{'_' + '_'.join(map(str, extra)) if extra else ''}.json"
    path.write_text(json.dumps(ds, indent=1) + "\n")
    return path, refused


def model_config(cfg: TrainConfig):
    """The Llama the YAML describes (``transformers.LlamaConfig``)."""
    m = cfg.model
    shape = ModelShape.llama(m.layers, m.hidden, m.heads, m.kv_heads, vocab=m.vocab)
    return shape.config(max_seq=m.seq_len)


def global_batches(cfg: TrainConfig) -> list[dict]:
    """The ``steps`` global batches of Chapter 6's runs (``helpers.models.llama.token_batch``)."""
    t, m = cfg.train, cfg.model
    return [token_batch(s, t.batch_size, m.seq_len, m.vocab) for s in range(t.steps)]


def reference(cfg: TrainConfig, batches: list[dict]) -> list[float]:
    """The single-process reference: AdamW on every whole global batch."""
    return train_reference(build_llama(model_config(cfg), cfg.train.seed), batches, _lr(cfg))


def _lr(cfg: TrainConfig) -> float:
    return cfg.train.learning_rate


# [start: zero-step]
def train_stage(deepspeed, cfg, json_path, batches, counter, device) -> tuple[list[float], dict]:
    """One run: the model and AdamW handed to ``deepspeed.initialize`` with the JSON file, then
    one optimizer step per global batch, counting the collectives; (this rank's losses, what it
    holds)."""
    model = build_llama(model_config(cfg), cfg.train.seed).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=_lr(cfg), weight_decay=0.01)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=str(json_path))
    rank, ranks = dist.get_rank(), dist.get_world_size()
    micro, losses = engine.train_micro_batch_size_per_gpu(), []
    with counter.window():
        for batch in batches:
            mine = shard_batch(batch, rank, ranks)  # this data-parallel rank's rows
            total = 0.0
            for i in range(engine.gradient_accumulation_steps()):
                rows = {k: v[i * micro : (i + 1) * micro].to(device) for k, v in mine.items()}
                loss = engine(**rows).loss
                engine.backward(loss)  # scaled by 1/accumulation; reduced where the stage says
                engine.step()  # the optimizer steps at the last micro-batch only
                total += loss.item() / engine.gradient_accumulation_steps()
            losses.append(total)
    return losses, held(engine, model)
    # [end: zero-step]


def held(engine, model) -> dict:
    """What this rank keeps after training: every parameter's elements (``ds_numel`` under
    ZeRO-3), those materialised between steps, ZeRO-3's partition of them (``ds_tensor``), and
    the elements of Adam's state (m and v of this rank's share)."""
    params = list(model.parameters())
    state = engine.optimizer.optimizer.state.values()
    return {
        "params": sum(getattr(p, "ds_numel", p.numel()) for p in params),
        "live": sum(p.data.numel() for p in params),
        "partition": sum(p.ds_tensor.numel() if hasattr(p, "ds_tensor") else 0 for p in params),
        "persistent": sum(bool(getattr(p, "ds_persist", False)) for p in params),
        "tensors": len(params),
        "adam_state": sum(t.numel() for s in state for t in s.values() if t.dim() > 0),
    }


def check(runs: list[dict], ref: list[float], tolerance: float = TOLERANCE) -> float:
    """The largest gap, over the runs and steps, between the mean of the ranks' losses and the
    reference; raises past ``tolerance``. ``runs``: every rank's result of one run each."""
    worst = 0.0
    for run in runs:
        ranks = run["ranks"]
        mean = [sum(r["losses"][k] for r in ranks) / len(ranks) for k in range(len(ref))]
        gap = max(abs(a - b) for a, b in zip(mean, ref))
        if not gap <= tolerance:
            raise AssertionError(
                f"{run['name']}: mean loss {mean} is {gap:.2e} from the reference {ref}, "
                f"more than {tolerance:g}"
            )
        worst = max(worst, gap)
    return worst
