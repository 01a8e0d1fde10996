"""Chapter 6 and 8 on GPUs: one Llama step loop under PyTorch FSDP2 or a Colossal-AI plugin.

    torchrun --nproc_per_node 2 -m helpers.demos.ch08_train --framework fsdp2 --precision bf16 ...
    ... --framework colossal --plugin zero --zero_stage 2 | --plugin hybrid --tp 2 [--overlap 0]
    ... --mem_cap_gib 10    (the out-of-memory lab: this process may use only 10 GiB of the GPU)
    ... --profile 2         (the PyTorch profiler over 2 steps: compute vs communication per rank)
    ... --compile --optim adamw_fused --plugin_kw reduce_bucket_size_in_m=128
                            (the flagship run's knobs, helpers.train.speed)

The flags, the build and the loop: :mod:`helpers.train.framework_run`. The layout flags are
Chapter 7's :class:`helpers.parallel.train_layout.TrainLayout` (its plugins ran on the 2×H200 box);
the
model, data and MFU definition are Chapter 9's (:func:`helpers.train.presets.mfu`:
(6N + 12·L·h·s)·tokens / (time · GPUs · 989.5e12)). Every rank first trains a single-device
reference copy on the first ``--ref_steps`` global batches; with ``--fail_on_divergence 0.05``
the run exits non-zero (after printing its results) when the mean loss is not finite or leaves
that reference by more than 0.05 (the flagship passes it; the Gemini NaN run is recorded without
it). An out-of-memory error is caught and reported (``oom: true`` with the peak reached) instead
of failing the run. On CPU (gloo) FSDP2 and Colossal-AI's TorchDDPPlugin run in fp32: the tests
use that path.
"""

import torch

from helpers.parallel.train_layout import TrainLayout
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch08 import FrameworkTrainResult
from helpers.train.framework_run import describe, divergence, layout_from, parser, run
from helpers.train.framework_run import summary_line
from helpers.train.layout_step import on_cpu

CPU_ONLY = "on CPU only --plugin ddp (TorchDDPPlugin, fp32) runs"


def main() -> None:
    args = parser().parse_args()
    with distributed(timeout_s=120) as env:
        layout = layout_from(args)
        if not env.is_gpu:  # the gloo path: fp32, FSDP2 or TorchDDPPlugin, a tiny model
            if args.framework == "colossal" and layout.plugin != "ddp":
                cli.require_gpu(env, layout.plugin, CPU_ONLY)
            layout = on_cpu(layout, precision="fp32")
        layout = TrainLayout.from_dict({**layout.__dict__, "world": env.world_size})
        result = describe(args, layout, env)
        if env.is_gpu:
            torch.backends.cuda.matmul.allow_tf32 = False
            if args.mem_cap_gib:
                total = torch.cuda.get_device_properties(env.device).total_memory
                torch.cuda.set_per_process_memory_fraction(
                    args.mem_cap_gib * 2**30 / total, env.device
                )
            torch.cuda.reset_peak_memory_stats(env.device)
        try:
            result.update(run(layout, args, env))
        except torch.OutOfMemoryError as e:  # the lab's "before": report it, do not crash
            result.update(oom=True, error=str(e).splitlines()[0][:300])
        if env.is_gpu:
            result["peak_mib"] = round(torch.cuda.max_memory_allocated(env.device) / 2**20, 1)
            result["reserved_mib"] = round(torch.cuda.max_memory_reserved(env.device) / 2**20, 1)
        say(summary_line(args, layout, result))
        check = args.fail_on_divergence is not None and not result["oom"]
        reason = divergence(result, args.fail_on_divergence) if check else None
        if reason:  # on stdout, before the RESULT line: a rank's last stderr line can be lost
            say(f"the loss check failed: {reason}")
        emit(FrameworkTrainResult, **result)
        if reason:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
