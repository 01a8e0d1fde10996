"""ZeRO stage 1 from scratch: full weights and gradients on every rank, Adam's m and v sharded.

Chapter 7, memory. ZeRO-1 (Rajbhandari et al. 2020, §5.1, "P_os") is data parallelism whose
optimizer states are split over the N data-parallel ranks. The Ψ parameters live in one flat fp32
buffer padded to a multiple of N; rank r owns the slice of s = ceil(Ψ/N) elements starting at r·s.
Each step every rank

1. computes the gradient of its B/N samples into a flat gradient buffer (the model's ``.grad`` are
   views of it),
2. reduce-scatters that buffer (``dist.reduce_scatter_tensor``, SUM, then / N): it receives the
   full-batch gradient of its own slice only,
3. runs Adam on its slice with its own m and v — the only optimizer state it keeps,
4. all-gathers the updated slices (``dist.all_gather_into_tensor``) back into the flat parameter
   buffer, so every rank again holds all the weights.

Every rank checks the result against unsharded Adam on the whole batch, run in a single process
inside the rank: weights after every step, and its m and v against the matching slice of the
reference's state. The reference calls ``torch.optim.adam.adam``, the function
``torch.optim.Adam.step`` runs, with per-parameter state like the optimizer's: the ``Adam`` class
itself imports torch._dynamo on first use (about 3 s of CPU per rank), too slow for four ranks on
two cores; tests/test_ch07_zero1.py checks that both give bitwise the same weights. It then counts the bytes of m and v it holds against
helpers.cost.memory's ZeRO-1 prediction 8Ψ/N (+ padding) and the bytes it sent per step.

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch07_zero1 --steps 5
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.optim.adam import adam

from helpers.train.reference import check_close, global_max, randn, strict_fp32
from helpers.run.env import distributed, emit, say
from helpers.parallel.zero import (
    adam_step_,
    comm_bytes_per_step,
    flat_layout,
    predicted_optimizer_bytes,
)


def make_model(hidden: int, seed: int, device: torch.device) -> nn.Module:
    torch.manual_seed(seed)  # the same seed on every rank: identical replicas
    return nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.Tanh(), nn.Linear(4 * hidden, 1)).to(
        device
    )


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batch", type=int, default=16, help="global batch size B (divisible by world size)"
    )
    parser.add_argument(
        "--hidden", type=int, default=8, help="input features h (the MLP is h -> 4h -> 1)"
    )
    parser.add_argument("--steps", type=int, default=5, help="Adam steps")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.steps < 1 or args.hidden < 1 or args.batch < 1:
        raise ValueError(
            f"--steps, --hidden and --batch must be positive, got {args.steps}, {args.hidden}, {args.batch}"
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
        model = make_model(args.hidden, args.seed, dev)
        params = list(model.parameters())
        lay = flat_layout(sum(p.numel() for p in params), N)  # raises if Ψ cannot be split over N
        flat_w = torch.zeros(lay.padded, dtype=torch.float32, device=dev)  # (N·s,) all weights
        flat_g = torch.zeros_like(flat_w)  # (N·s,) all gradients
        offset = 0
        for p in params:
            n = p.numel()
            flat_w[offset : offset + n].copy_(p.detach().flatten())
            p.data = flat_w[offset : offset + n].view_as(p)
            p.grad = flat_g[offset : offset + n].view_as(
                p
            )  # backward accumulates into flat_g in place
            offset += n
        own = lay.owned(env.rank)
        m = torch.zeros(
            lay.shard, dtype=torch.float32, device=dev
        )  # (s,) Adam momentum of my slice only
        v = torch.zeros_like(m)  # (s,) Adam variance of my slice only
        g_shard = torch.empty_like(m)  # (s,) receives the reduce-scattered gradient of my slice

        # --- the single-process reference: the same model, whole batch, unsharded Adam
        ref = make_model(args.hidden, args.seed, dev)
        ref_params = list(ref.parameters())
        ref_m = [
            torch.zeros_like(p) for p in ref_params
        ]  # unsharded Adam state: m and v for every parameter
        ref_v = [torch.zeros_like(p) for p in ref_params]
        ref_steps = [
            torch.tensor(0.0) for _ in ref_params
        ]  # torch.optim.Adam keeps its step counts on the CPU
        names = [n for n, _ in ref.named_parameters()]

        param_diff = 0.0
        for step in range(1, args.steps + 1):
            flat_g.zero_()
            nn.functional.mse_loss(model(x[mine]), y[mine]).backward()  # mean over my B/N samples
            if any(
                p.grad.data_ptr() != flat_g.data_ptr() + flat_g.element_size() * o
                for p, o in zip(params, _offsets(params))
            ):
                raise RuntimeError(
                    "autograd replaced a .grad view: the gradients no longer live in the flat buffer"
                )
            dist.reduce_scatter_tensor(g_shard, flat_g, op=dist.ReduceOp.SUM)
            g_shard /= N  # mean of N shard means = full-batch gradient of my slice
            adam_step_(flat_w[own], g_shard, m, v, step, args.lr, betas, eps)
            dist.all_gather_into_tensor(flat_w, flat_w[own].clone())  # every rank gets every slice

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
                f"8Ψ/N = {predicted} B + {padding_bytes} B of padding"
            )
        comm = comm_bytes_per_step(lay, flat_w.element_size())

        if env.rank == 0:
            say(
                f"ZeRO-1 on {N} ranks ({env.backend}): MLP {args.hidden}->{4 * args.hidden}->1, "
                f"Ψ = {lay.numel} fp32 params, batch {B} -> {b} per rank, {args.steps} Adam steps"
            )
            say(
                f"flat buffer padded {lay.numel} -> {lay.padded} ({lay.pad} zeros): {N} slices of {lay.shard}"
            )
            say(
                f"max |param - unsharded Adam reference| = {param_diff:.2e}; m, v of each slice: {state_diff:.2e}"
            )
            say(
                f"Adam m+v per rank: {opt_bytes} B = 8Ψ/N {predicted:g} B + padding {padding_bytes:g} B "
                f"(unsharded: {ref_opt_bytes} B, {ref_opt_bytes / opt_bytes:.2f}x more)"
            )
            say(
                f"sent per step per rank: reduce-scatter {comm['reduce_scatter']} B + all-gather {comm['all_gather']} B "
                f"= {comm['total']} B = 2(N-1)/N x {comm['buffer']} B buffer, as much as one all-reduce"
            )
            say("OK: ZeRO-1 matches unsharded Adam and holds 1/N of its optimizer state")
        emit(
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


def reference_adam_step(params, m, v, steps, lr, betas, eps) -> None:
    """Unsharded Adam on every parameter: what ``torch.optim.Adam(params, lr, betas, eps).step()`` runs.

    ``steps`` holds one step-count tensor per parameter, starting at 0: the function counts it up.
    """
    adam(
        params,
        [p.grad for p in params],
        m,
        v,
        [],
        steps,
        foreach=None,
        amsgrad=False,
        beta1=betas[0],
        beta2=betas[1],
        lr=lr,
        weight_decay=0.0,
        eps=eps,
        maximize=False,
    )


def _offsets(params: list[torch.Tensor]) -> list[int]:
    out, o = [], 0
    for p in params:
        out.append(o)
        o += p.numel()
    return out


if __name__ == "__main__":
    main()
