"""Megatron-Core in Chapter 6's head-to-head: GPTModel, the distributed optimizer, SDPA attention.

    torchrun --nproc_per_node 1 -m helpers.demos.ch06_megatron --precision bf16 \
        --layers 16 --hidden 2048 --heads 16 --kv_heads 16 --vocab 32000 --seq 2048 \
        --micro_batch 32 --sdpa cudnn --mcore_fused_ce

The flags are Chapter 8's (:func:`helpers.train.framework_run.parser`) and
``--mcore_fused_ce``, Megatron-Core's own fused cross-entropy. The build is
:mod:`helpers.train.megatron_run` (the converter's Megatron arguments -> Megatron-Core's objects),
the loop and the RESULT line :mod:`helpers.train.framework_bench`. GPU only: Megatron-Core's
wheels need Python 3.12 and its layers CUDA.
"""

from helpers.train import megatron_run
from helpers.train.framework_bench import main

if __name__ == "__main__":
    main("megatron", megatron_run.build, cpu=False, flags=megatron_run.add_arguments)
