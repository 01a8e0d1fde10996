"""Chapter 8's lab "A stale kernel-build lock": torch's build lock, left behind by a killed build.

    python -m helpers.demos.ch08_kernel_lock --timeout_s 3 [--clear]

Three runs share one build folder in a fresh temporary directory (never ~/.cache). Each run does
what Colossal-AI's ``build_jit`` (colossalai/kernel/extensions/cuda_extension.py:65-104) and
torch's ``_jit_compile`` (torch/utils/cpp_extension.py:2345-2400) do, with torch's own
``FileBaton`` on a file named ``lock``, and a sleep standing in for ninja and nvcc:

1. run 1 prints "Compiling the JIT fused_optim_cuda kernel", takes the baton and is SIGKILLed
   mid-build, as a launch timeout kills a rank; the lock stays (``clear_stale`` keeps it while run 1
   lives: a live holder has it open);
2. run 2 prints the same line and waits in ``FileBaton.wait()``, silent, until this lab's timeout;
3. with ``--clear``: :func:`helpers.run.build_lock.locks` reports the lock stale, ``clear_stale``
   removes it, and run 3 takes the baton, builds and finishes.

Exit code 1 without ``--clear`` (run 2 timed out), 0 with it when run 3 finished. Both print one
``RESULT {json}`` line. The lab itself: :func:`helpers.train.kernel_lock_lab.reproduce`, which
Chapter 10's pitfall runs in-process.
"""

import json
import sys

from helpers.run import cli
from helpers.train.kernel_lock_lab import reproduce


def main() -> None:
    p = cli.parser()
    cli.add(p, "timeout_s", 3.0, help=None)
    p.add_argument("--clear", action="store_true", help="then clear the stale lock and run again")
    args = p.parse_args()
    result = reproduce(args.timeout_s, args.clear, echo=lambda line: print(line, flush=True))
    # helpers.run.env.emit's line, without importing torch into this light process
    print("RESULT " + json.dumps({"rank": 0, **result}, sort_keys=True), flush=True)
    if not args.clear:
        sys.exit(1)  # run 2 never finished: the failure the lab reproduces
    sys.exit(0 if result["run3_exit"] == 0 and result["run3_finished"] else 1)


if __name__ == "__main__":
    main()
