"""A demo that misbehaves on request, to test :mod:`helpers.run.launch` (tests/test_launch.py).

--mode ok      every rank all-reduces its rank and reports the sum
--mode crash   rank 1 raises in the middle of the step
--mode hang    rank 1 never joins the all-reduce, so rank 0 waits forever
--mode silent  every rank finishes without a RESULT line
--mode build   rank 0 prints Colossal-AI's "Compiling the JIT ..." line, then hangs like a build
--mode flood   every rank reports 40 long results (about 10 kB of JSON each) between short lines,
               all at once: what torchrun's pipe must carry whole
--out DIR      rank 0 also writes the sum to DIR/sum.txt; --read FILE: and reports FILE's text
(the shared runs of a test run, :mod:`helpers.run.shared`, store an output folder and hash an input)
"""

import time
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.selftest import SelftestPartResult, SelftestResult


def main() -> None:
    parser = cli.parser()
    parser.add_argument(
        "--mode", choices=["ok", "crash", "hang", "silent", "build", "flood"], default="ok"
    )
    parser.add_argument("--out", default=None, help="a folder rank 0 writes sum.txt into")
    parser.add_argument("--read", default=None, help="a text file whose content is reported")
    args = parser.parse_args()
    mode = args.mode
    with distributed() as env:
        say(f"rank {env.rank} of {env.world_size} up on {env.backend}")
        if mode == "crash" and env.rank == 1:
            raise RuntimeError("rank 1 crashed on purpose in the middle of a step")
        if mode == "hang" and env.rank == 1:
            time.sleep(3600)
        if mode == "build" and env.rank == 0:  # what colossalai's cuda_extension.build_jit prints
            say("[extension] Compiling the JIT fused_optim_cuda kernel during runtime now")
            time.sleep(3600)
        if mode == "flood":
            for i in range(40):
                say(f"rank {env.rank} result {i}")
                emit(
                    SelftestPartResult,
                    index=i,
                    values=[env.rank * 100_000 + i * 1000 + k for k in range(1500)],
                )
            return
        x = torch.tensor([float(env.rank)], device=env.device)
        dist.all_reduce(x)
        if args.out and env.rank == 0:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "sum.txt").write_text(f"{x.item()}\n")
            say(f"wrote {Path(args.out) / 'sum.txt'}")
        if mode != "silent":
            emit(
                SelftestResult,
                sum=float(x.item()),
                backend=env.backend,
                device=str(env.device),
                cuda_visible=torch.cuda.is_available(),
                out=args.out,
                read=Path(args.read).read_text() if args.read else None,
            )


if __name__ == "__main__":
    main()
