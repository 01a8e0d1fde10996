"""The seed's communication share on a real training step, and its three remedies, measured.

Chapter 3. Trains a small Llama (:mod:`helpers.models.llama`, fresh batches every step) on all
ranks in each case ``layout:global_batch`` of ``--cases``: ``tp`` (Megatron tensor parallelism),
``dp`` (one all-reduce of all gradients after backward) or ``ddp`` (DistributedDataParallel,
gradient buckets all-reduced during backward). Each case times the same steps with communication
on and off (:mod:`helpers.train.share_cases`): t_compute = median step time without
communication, t_comm = median step time with it minus t_compute (the exposed communication),
share = t_comm / (t_comm + t_compute). On GPUs a few more steps run under torch.profiler to read
the NCCL kernels' own time as well.

Checks: the tp model's first loss equals the unsplit model's (asserted in fp32, recorded in bf16),
and after the timed steps with communication every rank holds the same replicated parameters, bit
for bit (recorded; the tests assert it). Rank 0 emits one RESULT per case.

    torchrun --nproc_per_node 2 -m helpers.demos.ch03_share --cases tp:2,dp:2,dp:8,ddp:8
"""

import torch

from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch03 import ShareResult
from helpers.train.share_cases import CPU_CASES, CPU_MODEL, GPU_CASES, GPU_MODEL, parse_cases
from helpers.train.share_cases import run_case


def main() -> None:
    p = cli.parser(__doc__)
    p.add_argument(
        "--cases", default=None, help=f"layout:global_batch,... (CPU {CPU_CASES}; GPU {GPU_CASES})"
    )
    for key in ("layers", "hidden", "heads", "vocab", "seq"):
        p.add_argument(f"--{key}", type=int, default=None)
    cli.add(p, "steps", None, help="timed steps per block (4 blocks: on, off, on, off)")
    cli.add(p, "warmup", 2, help=None)
    p.add_argument(
        "--profile_steps",
        type=int,
        default=None,
        help="GPU: steps profiled for NCCL kernel time (default 3)",
    )
    p.add_argument(
        "--dtype", choices=["fp32", "bf16"], default=None, help="default: bf16 on GPU, fp32 on CPU"
    )
    args = p.parse_args()
    with distributed() as env:
        for key, value in (GPU_MODEL if env.is_gpu else CPU_MODEL).items():
            setattr(args, key, getattr(args, key) or value)
        args.steps = args.steps or (6 if env.is_gpu else 2)
        if args.profile_steps is None:
            args.profile_steps = 3 if env.is_gpu else 0
        words = {"fp32": torch.float32, "bf16": torch.bfloat16}
        dtype = words[args.dtype or ("bf16" if env.is_gpu else "fp32")]
        if dtype == torch.float32:
            torch.backends.cuda.matmul.allow_tf32 = False
        cases = parse_cases(args.cases or (GPU_CASES if env.is_gpu else CPU_CASES))
        if env.rank == 0:
            say(
                f"communication share on {env.world_size} ranks ({env.backend}), {dtype}, "
                f"model {args.layers}L "
                f"h={args.hidden} v={args.vocab}, seq {args.seq}"
            )
            say(
                f"{'layout':<6}{'batch':>6}{'step ms':>10}{'compute ms':>12}{'comm ms':>10}"
                f"{'share':>8}{'tokens/s':>12}"
            )
        for layout, batch in cases:
            r = run_case(layout, batch, args, env, dtype)
            if env.rank == 0:
                say(
                    f"{layout:<6}{batch:>6}{r['t_step'] * 1e3:>10.2f}{r['t_compute'] * 1e3:>12.2f}"
                    f"{r['t_comm'] * 1e3:>10.2f}{r['share']:>8.2f}{r['tokens_per_s']:>12.0f}"
                )
                emit(ShareResult, **r)


if __name__ == "__main__":
    main()
