"""ZeRO stage 1 from scratch: full weights and gradients on every rank, Adam's m and v sharded.

Chapter 7, memory. ZeRO-1 (Rajbhandari et al. 2020, §5.1, "P_os") is data parallelism whose
optimizer states are split over the D data-parallel ranks. The Ψ parameters live in one flat fp32
buffer padded to a multiple of D; rank r_D owns the slice of ceil(Ψ/D) elements starting at
r_D·ceil(Ψ/D).
Each step every rank

1. computes the gradient of its B/D samples into a flat gradient buffer (the model's ``.grad`` are
   views of it),
2. reduce-scatters that buffer (``dist.reduce_scatter_tensor``, SUM, then / D): it receives the
   full-batch gradient of its own slice only,
3. runs Adam on its slice with its own m and v — the only optimizer state it keeps,
4. all-gathers the updated slices (``dist.all_gather_into_tensor``) back into the flat parameter
   buffer, so every rank again holds all the weights.

Every rank checks the result against unsharded Adam on the whole batch, run in a single process
inside the rank: weights after every step, and its m and v against the matching slice of the
reference's state. The reference (:func:`helpers.train.reference.reference_adam_step`) calls
``torch.optim.adam.adam``, the function ``torch.optim.Adam.step`` runs, with per-parameter state
like the optimizer's: the ``Adam`` class itself imports torch._dynamo on first use (about 3 s of
CPU per rank), too slow for four ranks on two cores; tests/test_ch07_zero1.py checks that both
give bitwise the same weights. It then counts the bytes of m and v it holds against
helpers.cost.memory's ZeRO-1 prediction 8Ψ/D (+ padding) and the bytes it sent per step. The flat
buffers: :mod:`helpers.train.flat_buffer`.

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch07_zero1 --steps 5
"""

import torch
import torch.distributed as dist
import torch.nn as nn

from helpers.models.mlp import tiny_mlp
from helpers.cost.memory import predicted_optimizer_bytes
from helpers.parallel.zero import adam_step_, comm_bytes_per_step, flat_layout
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch07 import Zero1Result
from helpers.train.flat_buffer import check_grad_views, flat_buffers, nbytes
from helpers.train.reference import check_close, global_max, randn, reference_adam_step
from helpers.train.reference import strict_fp32


def main() -> None:
    parser = cli.parser(__doc__)
    cli.add(parser, "batch", 16, help="global batch size B (divisible by world size)")
    cli.add(parser, "hidden", 8, help="input features h (the MLP is h -> 4h -> 1)")
    cli.add(parser, "steps", 5, help="Adam steps")
    cli.add(parser, "lr", 1e-2, help="Adam learning rate")
    cli.add(parser, "seed", cli.SEED)
    args = parser.parse_args()
    if args.steps < 1 or args.hidden < 1 or args.batch < 1:
        raise ValueError(
            f"--steps, --hidden and --batch must be positive, got {args.steps}, {args.hidden}, "
            f"{args.batch}"
        )
    strict_fp32()
    betas, eps = (0.9, 0.999), 1e-8

    with distributed() as env:
        N, B, dev = env.world_size, args.batch, env.device
        if B % N:
            raise ValueError(
                f"global batch B={B} must be divisible by the data-parallel size N={N}"
            )
        b = B // N
        x = randn(B, args.hidden, seed=args.seed + 1, device=dev)  # (B, h): the global batch
        y = randn(B, 1, seed=args.seed + 2, device=dev)  # (B, 1)
        mine = slice(env.rank * b, (env.rank + 1) * b)

        # --- the flat, padded buffers; the model's weights and grads become views of them
        model = tiny_mlp(args.hidden, args.seed, dev)
        params = list(model.parameters())
        # [start: zero1-buffers]
        lay = flat_layout(sum(p.numel() for p in params), N)  # raises if Ψ cannot be split over N
        flat_w, flat_g = flat_buffers(params, lay.padded, dev)  # (N·shard,) weights, gradients
        own = lay.owned(env.rank)
        m = torch.zeros(lay.shard, dtype=torch.float32, device=dev)  # (shard,) Adam momentum, mine
        v = torch.zeros_like(m)  # (shard,) Adam variance of my slice only
        g_shard = torch.empty_like(m)  # (shard,) receives the reduce-scattered gradient of my slice
        # [end: zero1-buffers]

        # --- the single-process reference: the same model, whole batch, unsharded Adam
        ref = tiny_mlp(args.hidden, args.seed, dev)
        ref_params = list(ref.parameters())
        # unsharded Adam state: m and v for every parameter
        ref_m = [torch.zeros_like(p) for p in ref_params]
        ref_v = [torch.zeros_like(p) for p in ref_params]
        # torch.optim.Adam keeps its step counts on the CPU
        ref_steps = [torch.tensor(0.0) for _ in ref_params]
        names = [n for n, _ in ref.named_parameters()]

        param_diff = 0.0
        for step in range(1, args.steps + 1):
            # [start: zero1-loop]
            flat_g.zero_()
            nn.functional.mse_loss(model(x[mine]), y[mine]).backward()  # mean over my B/N samples
            check_grad_views(params, flat_g)
            dist.reduce_scatter_tensor(g_shard, flat_g, op=dist.ReduceOp.SUM)
            g_shard /= N  # mean of N shard means = full-batch gradient of my slice
            adam_step_(flat_w[own], g_shard, m, v, step, args.lr, betas, eps)
            dist.all_gather_into_tensor(flat_w, flat_w[own].clone())  # every rank gets every slice
            # [end: zero1-loop]

            ref.zero_grad()
            nn.functional.mse_loss(ref(x), y).backward()
            with torch.no_grad():
                reference_adam_step(ref_params, ref_m, ref_v, ref_steps, args.lr, betas, eps)
            for n, p, r in zip(names, params, ref.parameters()):
                param_diff = max(param_diff, check_close(f"{n} after Adam step {step}", p, r))

        # my m and v against the matching slice of the reference optimizer's (unsharded) state
        flat_ref_m = torch.cat([t.flatten() for t in ref_m])
        flat_ref_v = torch.cat([t.flatten() for t in ref_v])
        real = slice(own.start, min(own.stop, lay.numel))
        k = real.stop - real.start  # my real (unpadded) elements
        state_diff = max(
            check_close("Adam m of my slice", m[:k], flat_ref_m[real]),
            check_close("Adam v of my slice", v[:k], flat_ref_v[real]),
        )
        if k < lay.shard and (m[k:].any() or v[k:].any() or flat_w[lay.numel :].any()):
            raise AssertionError("the padding of the flat buffer did not stay zero")
        param_diff, state_diff = global_max(param_diff, dev), global_max(state_diff, dev)

        # --- bytes: optimizer state held, against the memory model; bytes sent per step
        opt_bytes = nbytes(m) + nbytes(v)
        ref_opt_bytes = sum(nbytes(t) for t in ref_m + ref_v)
        predicted, padding_bytes = predicted_optimizer_bytes(lay, "fp32")
        if opt_bytes != predicted + padding_bytes:
            raise AssertionError(
                f"rank {env.rank} holds {opt_bytes} B of Adam state, the ZeRO-1 model predicts "
                f"8Ψ/D = {predicted} B + {padding_bytes} B of padding"
            )
        comm = comm_bytes_per_step(lay, flat_w.element_size())

        if env.rank == 0:
            say(
                f"ZeRO-1 on {N} ranks ({env.backend}): MLP {args.hidden}->{4 * args.hidden}->1, "
                f"Ψ = {lay.numel} fp32 params, batch {B} -> {b} per rank, {args.steps} Adam steps"
            )
            say(
                f"flat buffer padded {lay.numel} -> {lay.padded} ({lay.pad} zeros): "
                f"{N} slices of {lay.shard}"
            )
            say(
                f"max |param - unsharded Adam reference| = {param_diff:.2e}; "
                f"m, v of each slice: {state_diff:.2e}"
            )
            say(
                f"Adam m+v per rank: {opt_bytes} B = 8Ψ/D {predicted:g} B "
                f"+ padding {padding_bytes:g} B "
                f"(unsharded: {ref_opt_bytes} B, {ref_opt_bytes / opt_bytes:.2f}x more)"
            )
            say(
                f"sent per step per rank: reduce-scatter {comm['reduce_scatter']} B "
                f"+ all-gather {comm['all_gather']} B "
                f"= {comm['total']} B = 2(D-1)/D x {comm['buffer']} B buffer, "
                f"as much as one all-reduce"
            )
            say("OK: ZeRO-1 matches unsharded Adam and holds 1/D of its optimizer state")
        emit(
            Zero1Result,
            world_size=N,
            backend=env.backend,
            steps=args.steps,
            params=lay.numel,
            padded=lay.padded,
            pad=lay.pad,
            shard=lay.shard,
            owned=[own.start, own.stop],
            max_param_diff=param_diff,
            max_state_diff=state_diff,
            optimizer_bytes=opt_bytes,
            predicted_optimizer_bytes=predicted,
            padding_bytes=padding_bytes,
            unsharded_optimizer_bytes=ref_opt_bytes,
            weight_bytes=nbytes(flat_w),
            grad_bytes=nbytes(flat_g),
            comm_reduce_scatter_bytes=comm["reduce_scatter"],
            comm_all_gather_bytes=comm["all_gather"],
            comm_total_bytes=comm["total"],
            comm_all_reduce_bytes=comm["all_reduce"],
        )


if __name__ == "__main__":
    main()
