"""Chapter 3's communication-share cases: ``layout:global_batch`` parsed, and one case trained
and timed with communication on and off.

Used by ``helpers/demos/ch03_share.py``. Each case trains a small Llama
(:mod:`helpers.models.llama`, fresh batches every step) in one layout of
:mod:`helpers.train.share` and times the same steps with communication on and off: t_compute =
median step time without communication, t_comm = median step time with it minus t_compute (the
exposed communication), share = t_comm / (t_comm + t_compute)
(:func:`helpers.cost.comm.comm_share`).
"""

from __future__ import annotations

import statistics

import torch

from helpers.cost.comm import comm_share, ops_bytes_sent, tp_layer_ops
from helpers.models.llama import build_llama, llama_config, llama_params, shard_batch, token_batch
from helpers.run.env import say, sync
from helpers.train.share import Trainer, nccl_kernel_times, replicas_agree, time_steps

CPU_CASES = "tp:2,dp:2,dp:8,ddp:8"
GPU_CASES = "tp:2,dp:2,dp:8,ddp:8,tp:8,tp:32,dp:32,ddp:32"
CPU_MODEL = dict(layers=2, hidden=64, heads=4, vocab=256, seq=32)
# as recorded in results/2xNVIDIA-H200
GPU_MODEL = dict(layers=4, hidden=1024, heads=16, vocab=32000, seq=512)


def parse_cases(text: str) -> list[tuple[str, int]]:
    """'tp:2,dp:8' -> [('tp', 2), ('dp', 8)]."""
    cases = []
    for item in text.split(","):
        layout, _, batch = item.strip().partition(":")
        if layout not in ("tp", "dp", "ddp") or not batch.isdigit() or int(batch) < 1:
            raise ValueError(
                f"bad case {item!r}: use layout:global_batch with layout tp, dp or ddp, e.g. dp:8"
            )
        cases.append((layout, int(batch)))
    return cases


def run_case(layout, global_batch, args, env, dtype):
    """One case on every rank: timed steps with communication on, off, on, off, then (GPUs) a
    few profiled; the RESULT row of the case."""
    config = llama_config(
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        vocab=args.vocab,
        max_seq=args.seq,
        attn="sdpa",
    )
    n, dev = env.world_size, env.device
    if layout != "tp" and global_batch % n:
        raise ValueError(f"global batch {global_batch} does not split over {n} data-parallel ranks")
    steps = args.warmup + 4 * args.steps + args.profile_steps
    batches = []
    for k in range(steps):
        full = token_batch(k, global_batch, args.seq, config.vocab_size)
        part = full if layout == "tp" else shard_batch(full, env.rank, n)
        batches.append({name: t.to(dev) for name, t in part.items()})
    with torch.device(dev):  # initialise where it trains
        model = build_llama(config, dtype=dtype)
    first_loss_diff = None
    if layout == "tp":  # the split model must compute the unsplit model's loss
        with torch.no_grad():
            want = model(**batches[0]).loss.float()
    trainer = Trainer(layout, model, n)
    if layout == "tp":
        with torch.no_grad():
            first_loss_diff = abs(float(trainer.model(**batches[0]).loss.float() - want))
        # 16-bit: recorded, not asserted (a timing run must not die on round-off)
        if dtype == torch.float32:
            assert first_loss_diff < 1e-4, (
                f"tensor-parallel loss differs from the unsplit model's by {first_loss_diff:.2e}"
            )
    for b in batches[: args.warmup]:
        trainer.step(b)
    sync(dev)
    rest = batches[args.warmup :]
    chunks = [rest[i * args.steps : (i + 1) * args.steps] for i in range(4)] + [
        rest[4 * args.steps :]
    ]
    on = time_steps(trainer, chunks[0], True, dev)
    agree = replicas_agree(trainer.model, layout)  # recorded; tests/test_ch03.py asserts it
    if not agree and env.rank == 0:
        say(f"WARNING {layout}: replicas differ after steps with communication")
    off = time_steps(trainer, chunks[1], False, dev)
    on += time_steps(trainer, chunks[2], True, dev)
    off += time_steps(trainer, chunks[3], False, dev)
    kernels = nccl_kernel_times(trainer, chunks[4] if len(chunks) > 4 else [], dev)
    t_step, t_compute = statistics.median(on), statistics.median(off)
    t_comm = max(0.0, t_step - t_compute)
    share, advice = comm_share(t_comm, t_compute)
    params, elem = llama_params(config), torch.tensor([], dtype=dtype).element_size()
    if layout == "tp":
        ops = tp_layer_ops(global_batch, args.seq, args.hidden, elem) * args.layers
        per_rank = global_batch
    else:
        ops = [("all_reduce", float(params * elem))]
        per_rank = global_batch // n
    del trainer, model
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return dict(
        layout=layout,
        global_batch=global_batch,
        per_rank_batch=per_rank,
        seq=args.seq,
        n=n,
        overlap=layout == "ddp",
        t_step=t_step,
        t_compute=t_compute,
        t_comm=t_comm,
        share=share,
        above_half=advice is not None,
        tokens_per_s=global_batch * args.seq / t_step,
        steps_on=on,
        steps_off=off,
        replicas_agree=agree,
        first_loss_diff=first_loss_diff,
        params=params,
        dtype=str(dtype).removeprefix("torch."),
        comm_ops=ops,
        comm_bytes=ops_bytes_sent(ops, n) if n > 1 else 0.0,
        messages=len(ops),
        model=dict(layers=args.layers, hidden=args.hidden, heads=args.heads, vocab=args.vocab),
        backend=env.backend,
        **kernels,
    )
