"""Chapter 6's head-to-head: DeepSpeed ZeRO-2 on the flagship Llama, from the converter's JSON.

:func:`build` makes the Hugging Face Llama of the layout (the same weights and data as the
Colossal-AI and FSDP2 rows), trains the single-GPU reference on it, applies the levers that act
on a plain model (:func:`helpers.train.speed.tune_plain`: SDPA backend, compile per layer, the
fused loss head; :func:`helpers.train.levers.before_wrapping`: fused projections), and hands it
with the optimizer of ``--optim`` to ``deepspeed.initialize`` with the JSON that
:func:`helpers.config.deepspeed_json.to_deepspeed` writes for the run's book config
(:func:`helpers.train.framework_bench.book_config`; ZeRO stage ``--zero_stage``). DeepSpeed casts
the model to bf16 and keeps fp32 master weights in its ZeRO optimizer. :class:`DeepSpeedTrainer`
steps the engine. On the CPU the same path runs in fp32 on gloo (the tests' tiny run).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch.distributed as dist

from helpers.config.deepspeed_json import to_deepspeed
from helpers.models.llama import shard_batch, token_batch
from helpers.train import speed
from helpers.train.deepspeed_run import import_deepspeed
from helpers.train.framework_bench import book_config
from helpers.train.framework_run import make_optimizer, model_and_reference, optimizer_name


class DeepSpeedTrainer:
    """One optimizer step of the engine on global batch ``k``: this rank's rows, in
    ``gradient_accumulation_steps`` micro-batches; the mean loss."""

    def __init__(self, engine, layout, device):
        self.engine, self.layout, self.device = engine, layout, device
        self.rank, self.ranks = dist.get_rank(), dist.get_world_size()

    def step(self, k: int) -> float:
        layout, engine = self.layout, self.engine
        full = token_batch(k, layout.global_batch, layout.seq, layout.shape.vocab)
        mine = {n: v.to(self.device) for n, v in shard_batch(full, self.rank, self.ranks).items()}
        m, b = engine.gradient_accumulation_steps(), engine.train_micro_batch_size_per_gpu()
        total = None
        for i in range(m):
            loss = engine(**{n: v[i * b : (i + 1) * b] for n, v in mine.items()}).loss
            engine.backward(loss)
            engine.step()
            total = loss.detach() if total is None else total + loss.detach()
        return (total / m).item()


def build(layout, args, env):
    """(trainer, model config, reference losses, the RESULT's DeepSpeed fields)."""
    deepspeed = import_deepspeed(cpu=not env.is_gpu)
    deepspeed.init_distributed(dist_backend=env.backend)  # reuses the open process group
    model, config, reference = model_and_reference(layout, args, env)
    speed.tune_plain(model, args)
    ds, notes = to_deepspeed(book_config(layout, args, layout.zero_stage))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ds_config.json"
        path.write_text(json.dumps(ds, indent=1))
        engine, *_ = deepspeed.initialize(
            model=model, optimizer=make_optimizer(model, args, env.device), config=str(path)
        )
    extra = dict(
        plugin="deepspeed.initialize",
        optimizer=optimizer_name(args, env.device),
        deepspeed=deepspeed.__version__,
        deepspeed_config=ds,
        notes=notes,
    )
    return DeepSpeedTrainer(engine, layout, env.device), config, reference, extra
