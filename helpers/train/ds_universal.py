"""Chapter 5, "Changing the layout on resume": DeepSpeed's universal checkpoint on CPU ranks.

Used by :mod:`helpers.demos.ch05_dcp_universal` and :mod:`helpers.chapters.ch05_dcp`. A DeepSpeed
checkpoint (``engine.save_checkpoint``) is written per rank in the layout that saved it: one
``mp_rank_XX_model_states.pt`` per tensor-parallel rank and one
``zero_pp_rank_D_mp_rank_XX_optim_states.pt`` per data-parallel and tensor-parallel rank, each
holding that rank's flat ZeRO partition of the fp32 master weights and of Adam's moments. The
universal checkpoint is a conversion of it (``deepspeed/checkpoint/ds_to_universal.py``): one
folder per parameter, ``zero/<name>/{fp32,exp_avg,exp_avg_sq}.pt``, each holding the whole
tensor, tensor-parallel slices merged. A run started with ``"checkpoint": {"load_universal":
true}`` then cuts every tensor for its own layout when it loads
(``deepspeed/runtime/zero/stage_1_and_2.py``, ``_load_universal_checkpoint``).

Tensor parallelism here is DeepSpeed's AutoTP (``"tensor_parallel": {"autotp_size": T}``,
``deepspeed/runtime/tensor_parallel/config.py``), which splits the Llama's linear layers as
Megatron does. The model, the data and AdamW are the ones of :mod:`helpers.train.dcp_reshard`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from helpers.models.llama import build_llama, llama_config, shard_batch, token_batch
from helpers.train import dcp_reshard as dr
from helpers.train.deepspeed_run import DS_HOME

TAG = "step"  # the checkpoint's tag: <dir>/<TAG>/ (and "latest_universal" names it)


def config(world: int, tp: int, zero: int, universal: bool) -> dict:
    """The DeepSpeed JSON of a run: ZeRO ``zero`` over D = world / T ranks, AutoTP over T.

    DeepSpeed checks train_batch_size = micro × accumulation × world size, counting every rank
    (``deepspeed/runtime/config.py``, ``_batch_assertion``), AutoTP's too; the data loader is
    ours, so the number only has to pass that check."""
    d = world // tp
    micro = dr.BATCH // d
    out = {
        "train_batch_size": micro * world,
        "train_micro_batch_size_per_gpu": micro,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": zero},
        "steps_per_print": 10**9,
    }
    if tp > 1:
        out["tensor_parallel"] = {"autotp_size": tp}
    if universal:
        out["checkpoint"] = {"load_universal": True}
    return out


# [start: ds-engine]
def engine(deepspeed, tp: int, zero: int, universal: bool = False):
    """The tiny Llama and AdamW handed to ``deepspeed.initialize``; (engine, D, this rank's r_D)."""
    world = dist.get_world_size()
    model = build_llama(llama_config(**dr.SHAPE), seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=dr.LR)
    eng, *_ = deepspeed.initialize(
        model=model, optimizer=opt, config=config(world, tp, zero, universal)
    )
    if tp > 1:
        from deepspeed.utils import groups

        r_d = dist.get_rank(group=groups.get_data_parallel_group())
    else:
        r_d = dist.get_rank()
    return eng, world // tp, r_d
    # [end: ds-engine]


def train(eng, d: int, r_d: int, steps: range) -> list[float]:
    """One step per global batch of :func:`helpers.train.dcp_reshard.train`; the mean losses."""
    losses = []
    for k in steps:
        batch = shard_batch(token_batch(k, dr.BATCH, dr.SEQ, dr.SHAPE["vocab"]), r_d, d)
        loss = eng(**batch).loss
        eng.backward(loss)
        eng.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / dist.get_world_size())
    return losses


def convert_command(saved: Path, universal: Path) -> list[str]:
    """DeepSpeed's converter, one worker each way (the CPU has two cores)."""
    return [
        sys.executable,
        "-m",
        "deepspeed.checkpoint.ds_to_universal",
        "--input_folder",
        str(saved / TAG),
        "--output_folder",
        str(universal / TAG),
        "--num_extract_workers",
        "1",
        "--num_merge_workers",
        "1",
        "--inject_missing_state",
    ]


def convert(saved: Path, universal: Path) -> dict:
    """Run ``ds_to_universal`` on ``saved`` (a folder ``engine.save_checkpoint`` wrote) into
    ``universal``, and write ``latest_universal``, the file ``load_checkpoint`` reads the tag
    from. ``--inject_missing_state``: a model that is not Megatron's records no
    ``universal_checkpoint_info``, and the converter refuses without it. Returns the command, its
    output and the per-parameter folders written."""
    cmd = convert_command(saved, universal)
    env = {**os.environ, "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(DS_HOME), env.get("PYTHONPATH")]))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if done.returncode:
        raise RuntimeError(f"ds_to_universal failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    (universal / "latest_universal").write_text(TAG)
    params = sorted(p.name for p in (universal / TAG / "zero").iterdir() if p.is_dir())
    return {"command": cmd, "output": done.stdout, "params": params}
