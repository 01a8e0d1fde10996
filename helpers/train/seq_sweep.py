"""Chapter 9's sequence-length sweep: one layout, longer and longer sequences, until the GPU runs
out of memory.

Used by ``helpers/demos/ch09_sp_sweep.py`` (and its recorder, which parses its run lists with
:func:`parser`). The plugin is bf16 without ZeRO; the model one of
:data:`helpers.train.presets.PRESETS`; each length trains a few steps on one sequence per step.
"""

from __future__ import annotations

import time

import torch

from helpers.models.llama import token_batch
from helpers.parallel.vocab import OWN_AXIS_SP_MODES
from helpers.run import cli
from helpers.run.env import sync
from helpers.train.presets import PRESETS


def parser():
    """The command line (the recorder's tests parse its run lists with it)."""
    p = cli.parser()
    cli.add(p, "tp", 1)
    cli.add(p, "sp", 1)
    cli.add(p, "sp_mode", None)
    p.add_argument("--preset", choices=list(PRESETS), default="half")
    p.add_argument("--seqs", default="2048,4096,8192,16384,32768,65536")
    cli.add(p, "steps", 3)
    return p


def sweep_plugin(tp: int, sp: int, sp_mode: str | None):
    """bf16, no ZeRO; sp_size only where the mode has its own axis (all_to_all, ring_attn)."""
    from colossalai.booster.plugin import HybridParallelPlugin

    return HybridParallelPlugin(
        tp_size=tp,
        pp_size=1,
        sp_size=sp if sp_mode in OWN_AXIS_SP_MODES else None,
        enable_sequence_parallelism=sp_mode is not None,
        sequence_parallelism_mode=sp_mode,
        precision="bf16",
        zero_stage=0,
        max_norm=0.0,
    )


def out_of_memory(e: BaseException) -> bool:
    """torch's OutOfMemoryError, or a library's allocation failure reported as a RuntimeError."""
    text = str(e)
    return (
        isinstance(e, torch.cuda.OutOfMemoryError)
        or "out of memory" in text
        or "ALLOC_FAILED" in text
    )


def steps_at(model, booster, opt, seq: int, steps: int, vocab: int, device) -> float:
    """Seconds per step at this length (the first step untimed)."""
    start = None
    for k in range(steps):
        if k == 1:
            sync(device)
            start = time.perf_counter()
        batch = {n: t.to(device) for n, t in token_batch(k, 1, seq, vocab).items()}
        loss = model(**batch).loss
        booster.backward(loss, opt)
        opt.step()
        opt.zero_grad()
    sync(device)
    return (time.perf_counter() - start) / (steps - 1)
