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

The loops: :func:`helpers.train.faults.failing_loop` and :func:`helpers.train.faults.oom_step`.
Every timeout is short (``init_process_group(timeout=...)``) so a lab ends in seconds.
"""

from helpers.run import cli
from helpers.run.env import distributed
from helpers.train.faults import failing_loop, oom_step


def main() -> None:
    p = cli.parser()
    p.add_argument("--mode", choices=["ok", "skip", "crash", "nan", "oom"], default="ok")
    cli.add(p, "steps", 4)
    cli.add(p, "lr", None)
    cli.add(p, "timeout_s", 5.0)
    p.add_argument("--budget_mib", type=int, default=150)
    p.add_argument("--recompute", action="store_true")
    cli.add(p, "batch", 16)
    cli.add(p, "seq", 256)
    args = p.parse_args()
    if args.mode == "oom":
        return oom_step(args)
    if args.mode == "nan":  # lr 30: the loss grows ~1e5-fold a step and overflows within ~9 steps
        args.lr, args.steps = args.lr or 30.0, max(args.steps, 12)
    args.lr = args.lr or 0.01
    with distributed(backend="gloo", timeout_s=args.timeout_s) as env:
        failing_loop(env, args)


if __name__ == "__main__":
    main()
