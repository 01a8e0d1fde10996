"""Chapter 1, "the same with Colossal-AI": data parallelism through Booster + TorchDDPPlugin.

Runs on CPU (gloo) and GPU (NCCL). Every rank trains the same tiny Llama on its shard of each
fresh global batch (``plugin.prepare_dataloader`` hands out rows ``rank::world``), the plugin's
DDP all-reduces the gradients, and the mean loss over the world is compared step by step with a
single-process reference that trains on the whole batch.
"""

import argparse
import copy

import torch
import torch.distributed as dist
from torch.utils.data import TensorDataset

from helpers.run.env import distributed, emit, say
from helpers.models.llama import build_llama, llama_config, token_batch


def train_reference(model, batches, lr):
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for batch in batches:
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def train_booster(model, dataset, local_batch, lr, device):
    from colossalai.booster import Booster
    from colossalai.booster.plugin import TorchDDPPlugin

    plugin = TorchDDPPlugin()
    booster = Booster(plugin=plugin)
    loader = plugin.prepare_dataloader(
        dataset, batch_size=local_batch, shuffle=False, drop_last=True
    )
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model, opt, _, loader, _ = booster.boost(model, opt, dataloader=loader)
    losses = []
    for ids, labels in loader:
        loss = model(input_ids=ids.to(device), labels=labels.to(device)).loss
        booster.backward(loss, opt)
        opt.step()
        opt.zero_grad()
        world_mean = loss.detach().clone()
        dist.all_reduce(world_mean)  # SUM of the per-rank means
        losses.append(world_mean.item() / dist.get_world_size())
    del model, opt, booster, plugin  # known-facts: free the DDP reducer before teardown
    return losses


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="global batch (sequences per step)")
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
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
        parallel = train_booster(model, dataset, args.batch // env.world_size, args.lr, env.device)
        worst = max(abs(a - b) for a, b in zip(parallel, reference))
        if env.rank == 0:
            say(
                f"TorchDDPPlugin on {env.world_size} ranks ({env.backend}), global batch {args.batch}"
            )
            for k, (a, b) in enumerate(zip(parallel, reference)):
                say(f"step {k}: loss {a:.4f}  single-process reference {b:.4f}")
        assert worst < 1e-4, f"DDP loss differs from the reference by {worst:.2e}"
        emit(
            losses=[round(x, 4) for x in parallel],
            reference=[round(x, 4) for x in reference],
            max_diff=worst,
            world_size=env.world_size,
            backend=env.backend,
        )


if __name__ == "__main__":
    main()
