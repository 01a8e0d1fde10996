"""Chapter 8's node faults and Chapter 5's elastic restart: a tiny data-parallel job over several
hosts that checkpoints, resumes, and reports the hash of its final weights.

    torchrun --nnodes 2 --nproc_per_node 2 ... -m helpers.demos.ch08_nodes --steps 12 --ckpt_dir D
    python -m helpers.demos.ch08_nodes --reference 4 --steps 12     (one process, no faults)

The job, its one-process reference (``--reference WORLD``) and its whole-file checkpoints are
:mod:`helpers.train.elastic_job`'s: every ``--save_every`` steps rank 0 saves one; with
``--ckpt_dir`` holding one, the run resumes from the newest.
``--step_s`` paces the steps so that a fault lands mid-run; ``--timeout_s`` is the process
group's timeout, which ends a collective that waits on a peer that is gone or unreachable.
"""

import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch08 import NodesResult
from helpers.train import elastic_job as job


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
    if args.reference:
        digest = job.reference(args.reference, args.steps, args.seed)
        print(f"reference of {args.reference} ranks, {args.steps} steps: {digest}")
        return
    model = job.make_model(args.seed)
    opt = job.make_optimizer(model)
    with distributed(backend="gloo", timeout_s=args.timeout_s) as env:
        say(f"rank {env.rank} of {env.world_size} on {socket.gethostname()}")
        ckpt_dir = Path(args.ckpt_dir) if args.ckpt_dir else None
        start, found = job.resume(ckpt_dir, model, opt)
        if found:
            say(f"rank {env.rank} resumed from {found.name} (step {start})")
        for step in range(start, args.steps):
            began = time.monotonic()
            flat, loss = job.grad_of(model, args.seed, step, env.rank)
            gathered = [torch.empty_like(flat) for _ in range(env.world_size)]
            dist.all_gather(gathered, flat)
            job.apply(model, opt, gathered)
            done = step + 1
            if env.rank == 0 and ckpt_dir and (done % args.save_every == 0 or done == args.steps):
                ckpt_dir.mkdir(parents=True, exist_ok=True)
                job.save(ckpt_dir, done, model, opt)
            if env.rank == 0:
                say(f"step {done} done, loss {loss:.5f}")
            time.sleep(max(0.0, args.step_s - (time.monotonic() - began)))
        if env.rank == 0:
            emit(NodesResult, steps=args.steps, resumed_from=start,
                 weights_sha256=job.weights_hash(model),
                 restart_count=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
                 world_size=env.world_size)  # fmt: skip


if __name__ == "__main__":
    main()
