"""Chapter 8's failure labs: one small data-parallel training loop that fails on purpose.

    python -m helpers.demos.ch08_fail --mode ok|skip|crash|nan --timeout_s 5     (under torchrun)
    python -m helpers.demos.ch08_fail --mode oom --budget_mib 150 [--recompute]  (one process)

* ``ok``: four steps; gradients averaged with an explicit ``all_reduce`` per step.
* ``skip``: rank 1 skips step 1's all-reduce (as a rank that ``continue``s past an empty batch
  would): the ranks' collectives no longer match and the partner waits until the timeout.
* ``crash``: rank 1 is SIGKILLed at step 2 (:func:`helpers.train.faults.die`), as a lost node is.
* ``nan``: a learning rate far too large; a guard stops at the first non-finite loss.
* ``oom``: a tiny Llama under an address-space cap (``resource.setrlimit(RLIMIT_AS)``) set
  ``--budget_mib`` above what the process already maps; ``--recompute`` checkpoints every
  layer. Reports the activation bytes :mod:`helpers.cost.memory_llama` predicts and the peak RSS.

Every timeout is short (``init_process_group(timeout=...)``) so a lab ends in seconds.
"""

import argparse
import resource
import time

import torch
import torch.distributed as dist

from helpers.run.env import distributed, emit, say
from helpers.train.faults import maybe_die


def train(env, args) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(1 + env.rank)
    norms = []
    for step in range(args.steps):
        x = torch.randn(16, 32, generator=g)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        if args.mode == "crash":
            maybe_die(step, env.rank, kill_at=2, kill_rank=1)
        if args.mode == "skip" and env.rank == 1 and step == 1:
            say(f"rank 1 step {step}: no batch, skipping the gradient all-reduce")
        else:
            for p in model.parameters():  # data parallelism by hand: the mean gradient
                dist.all_reduce(p.grad)
                p.grad /= env.world_size
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
        norms.append(norm)
        say(f"rank {env.rank} step {step} loss {loss.item():.4g} grad_norm {norm:.4g}")
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"loss is {loss.item()} at step {step} (grad norms so far: "
                f"{', '.join(f'{n:.3g}' for n in norms)})"
            )
        opt.step()
        opt.zero_grad()
    emit(mode=args.mode, steps=args.steps, final_loss=round(loss.item(), 4))


def oom(args) -> None:
    """One training step of a tiny Llama under an address-space cap (one process, no group)."""
    import psutil

    from helpers.config.layout import LlamaShape
    from helpers.cost.memory_llama import head_activation_bytes, layer_activation_bytes
    from helpers.models.llama import build_llama, llama_config, token_batch

    shape = LlamaShape(layers=16, hidden=64, heads=2, kv_heads=2, vocab=256)
    config = llama_config(
        layers=shape.layers,
        hidden=shape.hidden,
        heads=shape.heads,
        vocab=shape.vocab,
        max_seq=args.seq,
    )
    model = build_llama(config)
    if args.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    warm = token_batch(1, 1, 16, shape.vocab)  # load the kernels and thread pools before the cap
    model(**warm).loss.backward()
    model.zero_grad(set_to_none=True)
    batch = token_batch(0, args.batch, args.seq, shape.vocab)
    tokens = args.batch * args.seq
    per_layer = (
        4 * tokens * shape.hidden
        if args.recompute
        else layer_activation_bytes(shape, tokens, args.seq, 4)
    )
    predicted = shape.layers * per_layer + head_activation_bytes(shape, tokens, 4)
    mapped = psutil.Process().memory_info().vms
    rss_before = psutil.Process().memory_info().rss
    cap = mapped + args.budget_mib * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    say(
        f"address space capped at {args.budget_mib} MiB above the {mapped / 2**20:,.0f} MiB already mapped; "
        f"predicted activations {predicted / 2**20:,.0f} MiB ({'recompute' if args.recompute else 'no recompute'})"
    )
    start = time.perf_counter()
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    emit(
        mode="oom",
        recompute=args.recompute,
        budget_mib=args.budget_mib,
        loss=round(loss.item(), 3),
        predicted_activation_mib=round(predicted / 2**20),
        peak_rss_mib=round(rss / 2**20),
        rss_growth_mib=round((rss - rss_before) / 2**20),
        seconds=round(time.perf_counter() - start, 1),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ok", "skip", "crash", "nan", "oom"], default="ok")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--timeout_s", type=float, default=5.0)
    p.add_argument("--budget_mib", type=int, default=150)
    p.add_argument("--recompute", action="store_true")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    args = p.parse_args()
    if args.mode == "oom":
        return oom(args)
    if args.mode == "nan":  # lr 30: the loss grows ~1e5-fold a step and overflows within ~9 steps
        args.lr, args.steps = args.lr or 30.0, max(args.steps, 12)
    args.lr = args.lr or 0.01
    with distributed(backend="gloo", timeout_s=args.timeout_s) as env:
        train(env, args)


if __name__ == "__main__":
    main()
