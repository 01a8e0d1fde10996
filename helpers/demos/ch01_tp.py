"""Tensor parallelism from scratch: Megatron-LM's column- then row-parallel MLP.

Chapter 1, "the four ways to split the work", way 2. The transformer MLP ``Y = GeLU(X W1^T + b1)
W2^T + b2`` (h -> 4h -> h) is split over P ranks as in Megatron-LM (Shoeybi et al. 2019, Sec. 3,
Fig. 3a):

* W1 (4h, h) is column-parallel: rank r holds the rows 4h/P * r .. of W1 (its 4h/P output
  features) and b1's matching slice; GeLU acts elementwise, so it needs no communication;
* W2 (h, 4h) is row-parallel: rank r holds the matching 4h/P input columns and produces a partial
  sum of Y; b2 is added once, after the sum;
* f (identity forward, all-reduce backward) enters the block, g (all-reduce forward, identity
  backward) leaves it: see :mod:`helpers.parallel.tp`.

Every rank checks the output, the input gradient and its own weight shards' gradients against the
matching slices of the unsplit MLP, run on the whole input inside the rank.

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch01_tp --hidden 8
"""

import torch.nn.functional as F

from helpers.models.mlp import gelu_mlp
from helpers.parallel.tp import f, g, shard
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch01 import TpResult
from helpers.train.reference import check_close, global_max, randn, sig, strict_fp32


def main() -> None:
    parser = cli.parser(__doc__)
    cli.add(parser, "batch", 2, help="batch size b")
    cli.add(parser, "seq", 4, help="sequence length s")
    cli.add(parser, "hidden", 8, help="hidden size h")
    parser.add_argument(
        "--ffn", type=int, default=None, help="MLP width (default 4h; divisible by world size)"
    )
    cli.add(parser, "seed", cli.SEED)
    args = parser.parse_args()
    strict_fp32()
    h = args.hidden
    ffn = args.ffn or 4 * h

    with distributed() as env:
        P, r, dev = env.world_size, env.rank, env.device
        if ffn % P:
            raise ValueError(
                f"MLP width 4h={ffn} must be divisible by the tensor-parallel size P={P} "
                f"(each rank holds 4h/P columns of W1 and rows of W2)"
            )
        x = randn(args.batch, args.seq, h, seed=args.seed + 1, device=dev)  # (b, s, h)
        target = randn(args.batch, args.seq, h, seed=args.seed + 2, device=dev)  # (b, s, h)
        w1 = randn(ffn, h, seed=args.seed + 3, device=dev, scale=h**-0.5)  # (4h, h)
        b1 = randn(ffn, seed=args.seed + 4, device=dev, scale=0.1)  # (4h,)
        w2 = randn(h, ffn, seed=args.seed + 5, device=dev, scale=ffn**-0.5)  # (h, 4h)
        b2 = randn(h, seed=args.seed + 6, device=dev, scale=0.1)  # (h,)

        # [start: tp]
        # --- tensor parallel: my shards of W1, b1 (output features) and W2 (input features)
        w1_r = shard(w1, 0, r, P).requires_grad_()  # (4h/P, h)   column-parallel
        b1_r = shard(b1, 0, r, P).requires_grad_()  # (4h/P,)
        w2_r = shard(w2, 1, r, P).requires_grad_()  # (h, 4h/P)   row-parallel
        b2_tp = b2.clone().requires_grad_()  # (h,) replicated, added after the all-reduce
        x_tp = x.clone().requires_grad_()  # (b, s, h) replicated input

        x_in = f(x_tp)  # (b, s, h)      identity; all-reduce of dL/dx in backward
        hid = F.gelu(x_in @ w1_r.T + b1_r)  # (b, s, 4h/P)   no communication
        partial = hid @ w2_r.T  # (b, s, h)      a partial sum of Y
        y = g(partial) + b2_tp  # (b, s, h)      all-reduce; identity in backward
        loss = F.mse_loss(y, target)
        loss.backward()
        # [end: tp]

        # --- single-process reference: the unsplit MLP on the same input
        ref = [t.clone().requires_grad_() for t in (x, w1, b1, w2, b2)]
        ref_y = gelu_mlp(*ref)
        ref_loss = F.mse_loss(ref_y, target)
        ref_loss.backward()
        rx, rw1, rb1, rw2, rb2 = (t.grad for t in ref)
        cols = slice(r * ffn // P, (r + 1) * ffn // P)

        out_diff = check_close("output Y", y, ref_y)
        check_close("loss", loss, ref_loss)
        grad_diffs = {
            "x": check_close("input grad dL/dx", x_tp.grad, rx),
            "w1": check_close(
                f"W1 shard grad (rows {cols.start}:{cols.stop})", w1_r.grad, rw1[cols]
            ),
            "b1": check_close("b1 shard grad", b1_r.grad, rb1[cols]),
            "w2": check_close(
                f"W2 shard grad (columns {cols.start}:{cols.stop})", w2_r.grad, rw2[:, cols]
            ),
            "b2": check_close("b2 grad", b2_tp.grad, rb2),
        }
        out_diff = global_max(out_diff, dev)
        grad_diffs = {k: global_max(v, dev) for k, v in grad_diffs.items()}

        if r == 0:
            say(
                f"tensor-parallel MLP on {P} ranks ({env.backend}): h={h}, 4h={ffn} -> "
                f"{ffn // P} MLP columns per rank"
            )
            say(
                f"  W1 {tuple(w1.shape)} -> {tuple(w1_r.shape)} per rank "
                f"(column-parallel, split on output)"
            )
            say(
                f"  W2 {tuple(w2.shape)} -> {tuple(w2_r.shape)} per rank "
                f"(row-parallel, split on input)"
            )
            say("  communication: 1 all-reduce forward (g), 1 all-reduce backward (f)")
            say(f"loss {sig(loss.item())}, max |Y - reference Y| = {out_diff:.2e}")
            for k, v in grad_diffs.items():
                which = (
                    "its slice of the reference grad"
                    if k in ("w1", "b1", "w2")
                    else "reference grad"
                )
                say(f"max |grad {k} - {which}| = {v:.2e}")
            say("OK: tensor parallel matches the unsplit MLP")
        emit(
            TpResult,
            world_size=P,
            hidden=h,
            ffn=ffn,
            ffn_per_rank=ffn // P,
            columns=[cols.start, cols.stop],
            w1_shard=list(w1_r.shape),
            w2_shard=list(w2_r.shape),
            loss=sig(loss.item()),
            ref_loss=sig(ref_loss.item()),
            max_out_diff=out_diff,
            max_grad_diff=max(grad_diffs.values()),
            grad_diffs=grad_diffs,
            backend=env.backend,
        )


if __name__ == "__main__":
    main()
