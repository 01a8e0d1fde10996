"""Chapter 10's pitfalls that run something: torchrun ranks, Colossal-AI code, a training loop.

Named by ``helpers/data/pitfalls.yaml``; each returns a
:class:`~helpers.chapters.ch10_shown.Shown`, like the in-process demos. All run on the CPU in a few
seconds each:

* ``loss_on_first_stage`` launches ``helpers.demos.ch10_pp_loss`` on 2 gloo ranks;
* ``gpt2_mask_not_causal`` calls Colossal-AI 0.5.0's GPT-2 mask builder
  (``colossalai/shardformer/modeling/gpt2.py::_get_attention_mask``) and transformers' GPT-2 sdpa
  attention on a tiny random GPT-2;
* ``all_to_all_unsupported`` asks Colossal-AI's GPT-2 policy for all_to_all sequence parallelism and
  shows the recorded Llama run whose sdpa attention lost its causal mask (``ch01_hybrid``);
* ``resume_without_rng`` trains a small dropout model with a shuffled sampler and resumes it twice;
* ``orphaned_workers`` shows ``subprocess.run(timeout=...)`` leaving a grandchild alive
  (torchrun's workers), and a killed process group leaving none;
* ``stale_kernel_lock`` runs Chapter 8's lab (:func:`helpers.train.kernel_lock_lab.reproduce`):
  torch's kernel-build lock (torch/utils/cpp_extension.py:2345, file_baton.py:34-63) left by a
  SIGKILLed build, the next run waiting on it silently, :func:`helpers.run.kernels.clear_stale`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import torch
from torch import nn

from helpers.record import results
from helpers.record.ch01 import layout_result
from helpers.train.checkpoint import DataPosition, ResumableSampler, rng_state, set_rng_state
from helpers.run.launch import launch
from helpers.notebook.measured import approx_list
from helpers.chapters.ch10_shown import Shown


def loss_on_first_stage() -> Shown:
    ranks = sorted(
        launch("ch10_pp_loss", 2, timeout_s=180, show="none").results, key=lambda r: r["rank"]
    )
    first, last = ranks[0], ranks[-1]
    return Shown(
        wrong=f"outputs['loss'] on stage 0: {first['local_loss']}; on the last stage: "
        f"{last['local_loss']}",
        fixed=f"broadcast from the last stage: every rank logs {first['broadcast_loss']} "
        f"(single-process reference {first['reference_loss']})",
        holds=first["local_loss"] is None
        and all(r["broadcast_loss"] == r["reference_loss"] for r in ranks),
    )


def _tiny_gpt2(seed: int = 0):
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, attn_implementation="sdpa"
    )
    return GPT2Model(config).eval()


def gpt2_mask_not_causal(seq: int = 6) -> Shown:
    """Does position 0's attention output change when only the last token changes?"""
    from colossalai.shardformer.modeling.gpt2 import _get_attention_mask

    model = _tiny_gpt2()
    no_flash = types.SimpleNamespace(sequence_parallelism_mode=None, enable_flash_attention=False)
    x = torch.randn(
        1, seq, model.config.n_embd, generator=torch.Generator().manual_seed(1)
    )  # (b, s, h)
    y = x.clone()
    y[:, -1] += 1.0  # change only the last token
    mask, _ = _get_attention_mask(model, no_flash, x, None, torch.ones(1, seq), None, None)
    attn = model.h[0].attn
    with torch.no_grad():
        leak = (
            (attn(x, attention_mask=mask)[0][:, 0] - attn(y, attention_mask=mask)[0][:, 0])
            .abs()
            .max()
            .item()
        )
        causal = (attn(x)[0][:, 0] - attn(y)[0][:, 0]).abs().max().item()
    return Shown(
        wrong=f"Colossal-AI's GPT-2 mask without flash attention has shape {tuple(mask.shape)} "
        "(padding only); transformers' sdpa then sets is_causal=False: position 0 moves by "
        f"{leak:.2e} when only token {seq - 1} changes — the model reads the future",
        fixed="a causal mask (no padding mask, or enable_flash_attention=True, which builds "
        f"is_causal=True): position 0 moves by {causal:.1e}",
        holds=leak > 1e-6 and causal == 0.0,
    )


def all_to_all_unsupported() -> Shown:
    from colossalai.shardformer.policies.gpt2 import GPT2ModelPolicy

    policy = GPT2ModelPolicy()
    policy.set_model(_tiny_gpt2())
    policy.set_shard_config(
        types.SimpleNamespace(
            sequence_parallelism_mode="all_to_all",
            enable_tensor_parallelism=False,
            enable_fused_normalization=False,
            enable_flash_attention=False,
            enable_jit_fused=False,
            pipeline_stage_manager=None,
        )
    )
    policy.preprocess()
    try:
        policy.module_policy()
        refused = None
    except AssertionError as err:
        refused = str(err)
    runs = {r["name"]: layout_result(r) for r in results.load("ch01_hybrid")["runs"]}
    trap, good = runs["TRAP sp=2 all_to_all, sdpa"], runs["sp=2 all_to_all (Ulysses)"]
    return Shown(
        wrong=f"GPT-2 policy: AssertionError '{refused}'. Llama with sdpa attention under "
        "all_to_all (recorded on 2×H200): loss off the single-GPU reference by up to "
        f"{trap['max_diff']:.2f}",
        fixed="a model whose policy supports the mode (Llama), built with "
        "attn_implementation='eager' so that transformers passes an explicit causal mask: "
        f"largest difference {good['max_diff']:.1e}",
        holds=refused is not None and trap["max_diff"] > 0.5 and good["max_diff"] < 1e-2,
    )


class _Dropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x)


def _train(
    steps: int, start: dict | None = None, restore_rng: bool = True, batch: int = 4
) -> tuple[list[float], dict]:
    """Train from scratch (``start`` None) or from a saved state; return losses and the state at the
    end."""
    g = torch.Generator().manual_seed(0)
    data = torch.randn(64, 9, generator=g)  # 8 features + target
    torch.manual_seed(0)
    model = _Dropout()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sampler = ResumableSampler(range(len(data)), num_replicas=1, rank=0, shuffle=True, seed=0)
    pos = DataPosition()
    if start is not None:
        model.load_state_dict(start["model"])
        opt.load_state_dict(start["optimizer"])
        if restore_rng:
            set_rng_state(start["rng"])
            pos = DataPosition(**start["data"])
        else:
            torch.manual_seed(1)  # a new process: a fresh random stream, the epoch started over
    sampler.set_position(pos.epoch, pos.batch_in_epoch * batch)
    order = iter(sampler)
    losses = []
    for _ in range(steps):
        idx = [next(order) for _ in range(batch)]
        out = model(data[idx, :8]).squeeze(-1)
        loss = ((out - data[idx, 8]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 6))
        pos.batch_in_epoch += 1
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "rng": rng_state(),
        "data": vars(pos).copy(),
    }
    return losses, state


def resume_without_rng(steps: int = 6, stop: int = 3) -> Shown:
    full, _ = _train(steps)
    _, saved = _train(stop)
    bare, _ = _train(steps - stop, saved, restore_rng=False)
    exact, _ = _train(steps - stop, saved, restore_rng=True)
    return Shown(
        wrong=f"uninterrupted losses after step {stop}: {approx_list(full[stop:])}; resumed from "
        f"weights and optimizer only: {approx_list(bare)} (other dropout masks, the epoch's first "
        "batches again)",
        fixed="also restoring RNG states and the data position (helpers.train.checkpoint): "
        f"{approx_list(exact)}, equal to the uninterrupted run's: {exact == full[stop:]}",
        holds=bare != full[stop:] and exact == full[stop:],
    )


_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _start(pidfile: Path, **kw) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _PARENT, str(pidfile)], **kw)
    for _ in range(100):
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.05)
    return proc


def orphaned_workers() -> Shown:
    """A parent (standing for torchrun) starts a worker; the parent is killed on a timeout."""
    folder = Path(tempfile.mkdtemp(prefix="ch10-orphans-"))
    naive = _start(folder / "naive")
    naive.kill()  # what subprocess.run(timeout=...) does: kill the direct child only
    naive.wait()
    worker = int((folder / "naive").read_text())
    time.sleep(0.2)
    left = _alive(worker)
    if left:
        os.kill(worker, signal.SIGKILL)  # clean up after the demonstration
    # [start: kill-process-group]
    grouped = _start(folder / "group", start_new_session=True)  # its own session and group
    os.killpg(grouped.pid, signal.SIGKILL)  # on a timeout: the whole group, workers included
    grouped.wait()
    # [end: kill-process-group]
    worker2 = int((folder / "group").read_text())
    time.sleep(0.2)
    left2 = _alive(worker2)
    return Shown(
        wrong=f"parent killed, its worker still alive: {left}",
        fixed="started with start_new_session=True and killed with os.killpg: worker alive: "
        f"{left2}",
        holds=left and not left2,
    )


def stale_kernel_lock(timeout_s: float = 3.0) -> Shown:
    """A kernel build killed midway; the next run waits on its lock (Chapter 8's lab,
    in-process)."""
    from helpers.train.kernel_lock_lab import KERNEL, reproduce

    r = reproduce(timeout_s=timeout_s, clear=True, echo=None)
    return Shown(
        wrong=f"run 1 was SIGKILLed while it built {KERNEL} (as a launch timeout kills a rank): "
        f"lock file left behind: {r['lock_left']}. Run 2 printed '[extension] Compiling the JIT "
        f"{KERNEL} kernel during runtime now' and then nothing until its {timeout_s:g} s timeout "
        f"(silent: {r['run2_silent']}): torch's FileBaton.wait() sleeps while the file exists, "
        "with no message and no time limit (torch/utils/file_baton.py:49, called at "
        "cpp_extension.py:2400)",
        fixed=f"helpers.run.kernels.clear_stale removed {r['removed']} lock with no live holder "
        f"(and kept it while run 1 lived and had it open: {r['kept_while_held']}); run 3 then "
        f"built and exited with code {r['run3_exit']}. On a GPU machine, `make kernels` builds "
        "once, printing its progress",
        holds=r["lock_left"]
        and r["run2_silent"]
        and r["kept_while_held"]
        and r["removed"] == 1
        and r["run3_exit"] == 0
        and r["run3_finished"]
        and not r["lock_after"],
    )
