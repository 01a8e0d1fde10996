"""Chapter 5: save under one layout with PyTorch DCP, resume under another, and time async_save.

    torchrun --nproc_per_node 4 -m helpers.demos.ch05_dcp --phase save --dir CKPT
    torchrun --nproc_per_node 2 -m helpers.demos.ch05_dcp --phase load --dir CKPT

``save`` (4 ranks, FSDP2 over D = 2 and tensor parallel over T = 2 on a 2-D DeviceMesh): trains
``--save_at`` steps of the tiny Llama, saves model and AdamW with ``dcp.save`` (timed, repeated),
then with ``dcp.async_save`` (the seconds until it returns and until its future completes), and
finally starts one more ``async_save`` and keeps training while it writes: the run continues to
``--steps`` and its losses are the uninterrupted reference.

``load`` (2 ranks, or 1): for each of ``--layouts`` (default FSDP2 over 2 ranks, then tensor
parallel over 2) builds the model in that layout, reads the step-``save_at`` checkpoint into it
and trains on to ``--steps``; rank 0 reports the losses and each rank the block of one weight it
holds. Three checks come with it: the checkpoint written asynchronously while training went on
holds the same numbers as the blocking one (0 difference); a control restores the weights but not
AdamW's state; and the first layout is also trained from scratch, which measures how far two
layouts drift apart through fp32 reduction order alone.

The tolerance, :data:`helpers.train.dcp_reshard.TOLERANCE` = 1e-4 on losses near 4.6. The layouts
sum the same products in different orders (the T partial sums of a row-split matmul, all-reduces
over other groups), so a resumed run cannot equal the reference bit for bit; that drift stays near
1e-6 over a few steps (the from-scratch run measures it). Losing AdamW's moments and step count
moves every loss after the first resumed step by several 1e-3 (the control measures it). 1e-4
lies between the two, with a factor of about 10 or more on each side.
"""

import tempfile
import time

import torch.distributed as dist

from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch05 import DcpLoadResult, DcpSaveResult
from helpers.train import dcp_reshard as dr

WEIGHT = "model.layers.0.mlp.down_proj.weight"  # split 2-D under dp2xtp2: rows by D, columns by T


def save_phase(args, env) -> dict:
    model, opt, mesh = dr.build(args.layout, args.hidden, args.layers)
    group = dist.new_group(backend="gloo")  # the checkpoint's own group (async_save's thread)
    before = dr.train(model, opt, mesh, range(args.save_at))
    blocking = [dr.timed_save(model, opt, f"{args.dir}/sync", group) for _ in range(args.repeats)]
    returned, completed = [], []
    for i in range(args.repeats):  # alone: nothing else runs while it writes
        future, back, t0 = dr.start_async_save(model, opt, f"{args.dir}/async_{i}", group)
        future.result()
        returned.append(back)
        completed.append(time.perf_counter() - t0)
    # once more, and the training goes on while the thread writes
    future, back, t0 = dr.start_async_save(model, opt, f"{args.dir}/async", group)
    done_at = []
    future.add_done_callback(lambda _: done_at.append(time.perf_counter() - t0))
    after, steps_meanwhile = [], 0
    for k in range(args.save_at, args.steps):
        after += dr.train(model, opt, mesh, range(k, k + 1))
        steps_meanwhile += not future.done()
    future.result()
    while not done_at:  # the callback runs in the writer thread just after the result is set
        time.sleep(0.001)
    return dict(
        losses=before + after,
        blocking_s=blocking,
        async_return_s=returned,
        async_complete_s=completed,
        overlapped_return_s=back,
        overlapped_complete_s=done_at[0],
        steps_while_writing=steps_meanwhile,
        state_bytes=dr.state_bytes(model, opt),
        chunk=dr.local_chunk(model, WEIGHT),
    )


def load_phase(args, env) -> dict:
    out = {"layouts": {}}
    for i, layout in enumerate(args.layouts):
        model, opt, mesh = dr.build(layout, args.hidden, args.layers)
        dr.restore(model, opt, f"{args.dir}/sync")
        if i == 0:  # the checkpoint written while training went on: the same numbers?
            twin, twin_opt, _ = dr.build(layout, args.hidden, args.layers)
            dr.restore(twin, twin_opt, f"{args.dir}/async")
            out["async_vs_sync"] = dr.max_state_diff(dr.state(model, opt), dr.state(twin, twin_opt))
            del twin, twin_opt
        out["layouts"][layout] = dict(
            losses=dr.train(model, opt, mesh, range(args.save_at, args.steps)),
            chunk=dr.local_chunk(model, WEIGHT),
        )
        if i == 0:
            model, opt, mesh = dr.build(
                layout, args.hidden, args.layers
            )  # the control: weights, but AdamW starts afresh
            dr.restore(model, opt, f"{args.dir}/sync", optimizer=False)
            out["weights_only"] = dr.train(model, opt, mesh, range(args.save_at, args.steps))
            model, opt, mesh = dr.build(
                layout, args.hidden, args.layers
            )  # the floor: this layout from step 0
            out["from_scratch"] = dr.train(model, opt, mesh, range(args.steps))
    return out


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--phase", choices=("save", "load"), required=True)
    parser.add_argument("--dir", default=None, help="checkpoint folder (save: a new temporary one)")
    parser.add_argument("--layout", default="dp2xtp2", choices=list(dr.LAYOUTS), help="save's")
    parser.add_argument("--layouts", nargs="+", default=["fsdp2", "tp2"], choices=list(dr.LAYOUTS))
    cli.add(parser, "steps", 8)
    cli.add(parser, "hidden", dr.SHAPE["hidden"])
    cli.add(parser, "layers", dr.SHAPE["layers"])
    parser.add_argument("--save_at", type=int, default=4, help="steps done when saving")
    parser.add_argument("--repeats", type=int, default=3, help="timed saves of each kind")
    args = parser.parse_args()
    if not 0 < args.save_at < args.steps:
        raise SystemExit(f"--save_at must be between 1 and --steps - 1, not {args.save_at}")
    with distributed() as env:
        common = dict(phase=args.phase, world_size=env.world_size, weight=WEIGHT)
        if args.phase == "save":
            if args.dir is None:
                args.dir = tempfile.mkdtemp(prefix="ch05-dcp-") if env.rank == 0 else ""
                box = [args.dir]
                dist.broadcast_object_list(box)
                args.dir = box[0]
            out = save_phase(args, env)
            if env.rank == 0:
                out["saved_chunks"] = dr.saved_chunks(f"{args.dir}/sync", "model." + WEIGHT)
                say(f"saved {args.layout} at step {args.save_at} to {args.dir}")
            emit(DcpSaveResult, dir=args.dir, **common, **out)
        else:
            if args.dir is None:
                raise SystemExit("--phase load needs --dir, the folder the save phase wrote")
            out = load_phase(args, env)
            if env.rank == 0:
                say(f"resumed {', '.join(args.layouts)} from {args.dir} at step {args.save_at}")
            emit(DcpLoadResult, dir=args.dir, **common, **out)


if __name__ == "__main__":
    main()
