"""Chapter 8's node faults and Chapter 5's elastic restart: a tiny data-parallel job over several
hosts that checkpoints, resumes, and reports the hash of its final weights.

    torchrun --nnodes 2 --nproc_per_node 2 ... -m helpers.demos.ch08_nodes --steps 12 --ckpt_dir D
    python -m helpers.demos.ch08_nodes --reference 4 --steps 12     (one process, no faults)

Every step each rank draws its own batch from (seed, step, rank) and computes its gradient; the
gradients are all-gathered and summed in rank order, so the order of the sum is fixed and the
one-process reference (``--reference WORLD``: the same per-rank gradients, summed in the same
order) gives the same bits. Every ``--save_every`` steps rank 0 writes ``step_XXXXXXXX.pt``
(weights, momentum, step) to a temporary file and renames it (``os.replace`` is atomic), so a
checkpoint that exists is whole; with ``--ckpt_dir`` holding one, the run resumes from the newest.
``--step_s`` paces the steps so that a fault lands mid-run; ``--timeout_s`` is the process
group's timeout, which ends a collective that waits on a peer that is gone or unreachable.
"""

import hashlib
import os
import re
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.run import cli
from helpers.run.env import distributed, emit, say

CKPT = re.compile(r"^step_(\d{8})\.pt$")


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def batch(seed: int, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s batch of step ``step``: a function of (seed, step, rank) alone."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    x = torch.randn(8, 16, generator=g)
    return x, x[:, :1].sin() + 0.1 * torch.randn(8, 1, generator=g)


def grad_of(model, seed: int, step: int, rank: int) -> tuple[torch.Tensor, float]:
    """This rank's gradient, flattened, and its loss."""
    x, y = batch(seed, step, rank)
    loss = torch.nn.functional.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([g.reshape(-1) for g in grads]), loss.item()


def apply(model, opt, gathered: list[torch.Tensor]) -> None:
    """Average the ranks' gradients (summed in rank order) and take one optimizer step."""
    mean = torch.stack(gathered).sum(0) / len(gathered)
    offset = 0
    for p in model.parameters():
        p.grad = mean[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()
    opt.step()


def weights_hash(model) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def latest(ckpt_dir: Path) -> Path | None:
    found = sorted(p for p in ckpt_dir.glob("step_*.pt") if CKPT.match(p.name))
    return found[-1] if found else None


def save(ckpt_dir: Path, step: int, model, opt) -> None:
    final = ckpt_dir / f"step_{step:08d}.pt"
    part = final.with_name(final.name + ".part")
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, part)
    os.replace(part, final)


def main() -> None:
    p = cli.parser(__doc__)
    cli.add(p, "steps", 12)
    cli.add(p, "seed", 0)
    cli.add(p, "timeout_s", 5.0)
    p.add_argument("--ckpt_dir", default=None, help="checkpoints: saved here, resumed from here")
    p.add_argument("--save_every", type=int, default=2)
    p.add_argument("--step_s", type=float, default=0.0, help="seconds each step lasts at least")
    p.add_argument("--reference", type=int, default=0, help="one process playing WORLD ranks")
    args = p.parse_args()
    torch.set_num_threads(1)
    model = make_model(args.seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if args.reference:
        for step in range(args.steps):
            apply(
                model, opt, [grad_of(model, args.seed, step, r)[0] for r in range(args.reference)]
            )
        print(f"reference of {args.reference} ranks, {args.steps} steps: {weights_hash(model)}")
        return
    with distributed(backend="gloo", timeout_s=args.timeout_s) as env:
        say(f"rank {env.rank} of {env.world_size} on {socket.gethostname()}")
        start, ckpt_dir = 0, Path(args.ckpt_dir) if args.ckpt_dir else None
        if ckpt_dir and (found := latest(ckpt_dir)):
            state = torch.load(found)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            start = state["step"]
            say(f"rank {env.rank} resumed from {found.name} (step {start})")
        for step in range(start, args.steps):
            began = time.monotonic()
            flat, loss = grad_of(model, args.seed, step, env.rank)
            gathered = [torch.empty_like(flat) for _ in range(env.world_size)]
            dist.all_gather(gathered, flat)
            apply(model, opt, gathered)
            done = step + 1
            if env.rank == 0 and ckpt_dir and (done % args.save_every == 0 or done == args.steps):
                ckpt_dir.mkdir(parents=True, exist_ok=True)
                save(ckpt_dir, done, model, opt)
            if env.rank == 0:
                say(f"step {done} done, loss {loss:.5f}")
            time.sleep(max(0.0, args.step_s - (time.monotonic() - began)))
        if env.rank == 0:
            emit(steps=args.steps, resumed_from=start, weights_sha256=weights_hash(model),
                 restart_count=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                 world_size=env.world_size)  # fmt: skip


if __name__ == "__main__":
    main()
