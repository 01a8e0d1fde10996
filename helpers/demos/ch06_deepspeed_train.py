"""DeepSpeed in Chapter 6's head-to-head: one Llama, ZeRO-2 from the converter's JSON, timed.

    torchrun --nproc_per_node 1 -m helpers.demos.ch06_deepspeed_train --precision bf16 \
        --layers 16 --hidden 2048 --heads 16 --kv_heads 16 --vocab 32000 --seq 2048 \
        --zero_stage 2 --micro_batch 48 --compile --optim adamw_fused --sdpa cudnn --fused_ce liger

The flags are Chapter 8's (:func:`helpers.train.framework_run.parser`); the build is
:mod:`helpers.train.deepspeed_bench`, the loop and the RESULT line
:mod:`helpers.train.framework_bench`. On the CPU it runs the tiny shape in fp32 on gloo.
"""

from helpers.train import deepspeed_bench
from helpers.train.framework_bench import main

if __name__ == "__main__":
    main("deepspeed", deepspeed_bench.build)
