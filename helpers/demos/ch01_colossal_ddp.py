"""Chapter 1, "the same with Colossal-AI": data parallelism through Booster + TorchDDPPlugin.

Runs on CPU (gloo) and GPU (NCCL). Every rank trains the same tiny Llama on its shard of each
fresh global batch (``plugin.prepare_dataloader`` hands out rows ``rank::world``,
:func:`helpers.train.plugin_step.train_ddp`), the plugin's DDP all-reduces the gradients, and
the mean loss over the world is compared step by step with a single-process reference that trains
on the whole batch (:func:`helpers.train.reference.train_reference`).
"""

import copy

import torch
from torch.utils.data import TensorDataset

from helpers.models.llama import build_llama, llama_config, token_batch
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch01 import ColossalDdpResult
from helpers.train.plugin_step import train_ddp
from helpers.train.reference import train_reference


def main() -> None:
    p = cli.parser()
    cli.add_all(p, steps=4, batch=8, seq=32, lr=3e-3)
    args = p.parse_args()
    with distributed() as env:
        if args.batch % env.world_size:
            raise ValueError(f"--batch {args.batch} does not split over {env.world_size} ranks")
        config = llama_config(layers=2, hidden=64, heads=4, vocab=128)
        model = build_llama(config).to(env.device)
        batches = [
            token_batch(k, args.batch, args.seq, config.vocab_size) for k in range(args.steps)
        ]
        on_device = [{k: v.to(env.device) for k, v in b.items()} for b in batches]
        reference = train_reference(copy.deepcopy(model), on_device, args.lr)
        ids = torch.cat([b["input_ids"] for b in batches])  # (steps·batch, seq)
        dataset = TensorDataset(ids, ids.clone())
        parallel = train_ddp(model, dataset, args.batch // env.world_size, args.lr, env.device)
        worst = max(abs(a - b) for a, b in zip(parallel, reference))
        if env.rank == 0:
            say(
                f"TorchDDPPlugin on {env.world_size} ranks ({env.backend}), "
                f"global batch {args.batch}"
            )
            for k, (a, b) in enumerate(zip(parallel, reference)):
                say(f"step {k}: loss {a:.4f}  single-process reference {b:.4f}")
        assert worst < 1e-4, f"DDP loss differs from the reference by {worst:.2e}"
        emit(
            ColossalDdpResult,
            losses=[round(x, 4) for x in parallel],
            reference=[round(x, 4) for x in reference],
            max_diff=worst,
            world_size=env.world_size,
            backend=env.backend,
        )


if __name__ == "__main__":
    main()
