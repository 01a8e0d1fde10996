"""Chapter 9: expert parallelism from scratch, checked against a single-process MoE layer.

    torchrun --nproc_per_node 2 -m helpers.demos.ch09_moe --experts 4 --k 2 --capacity_factor 1.0

Every rank builds the same full :class:`helpers.moe.MoELayer` (seeded) as the reference, keeps
only its E/P experts for the parallel layer, and routes its own tokens. The parallel forward
(:func:`helpers.moe.expert_parallel_forward`: dispatch, all-to-all, local experts, all-to-all
back, combine) must give the reference's outputs for this rank's tokens, and after one backward
each rank's expert gradients must equal the reference's gradients of those experts (the
all-to-all's backward carries the other ranks' contributions home); the replicated router's
gradient equals the reference's after an all-reduce, as in data parallelism. The load per expert
(tokens routed, kept within the capacity, dropped) is reported from every rank.
"""

import argparse

import torch
import torch.distributed as dist

from helpers.env import distributed, emit, max_abs_diff, say
from helpers.moe import MoELayer, expert_parallel_forward

AUX_WEIGHT = 0.01


def group_tokens(rank: int, tokens: int, hidden: int, skew: float) -> torch.Tensor:
    """This rank's tokens; ``skew`` > 0 shifts them along one direction so routing is unbalanced."""
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(tokens, hidden, generator=g)
    return x + skew * torch.ones(hidden) / hidden**0.5


def objective(out: torch.Tensor, aux: torch.Tensor, rank: int) -> torch.Tensor:
    """A loss with a different target per rank, so every gradient is non-trivial."""
    target = torch.randn(out.shape, generator=torch.Generator().manual_seed(2000 + rank))
    return ((out - target) ** 2).sum() + AUX_WEIGHT * aux


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--tokens", type=int, default=32, help="tokens per rank")
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--ffn", type=int, default=32)
    p.add_argument("--capacity_factor", type=float, default=1.0)
    p.add_argument("--skew", type=float, default=0.0)
    args = p.parse_args()
    with distributed(backend="gloo") as env:
        if args.experts % env.world_size:
            raise ValueError(f"{args.experts} experts do not split over {env.world_size} ranks")
        local = args.experts // env.world_size
        mine = slice(env.rank * local, (env.rank + 1) * local)
        full = MoELayer(args.hidden, args.ffn, args.experts, args.k, args.capacity_factor)
        x = group_tokens(env.rank, args.tokens, args.hidden, args.skew)

        # reference: the whole layer in this process, on this rank's tokens (one GShard group)
        ref_out, ref_routing, ref_aux = full(x)
        objective(ref_out, ref_aux, env.rank).backward()
        # the gradient the reference would have for all ranks' tokens: sum over groups
        ref_grads = {n: p.grad.clone() for n, p in full.named_parameters()}
        for g in ref_grads.values():
            dist.all_reduce(g)

        router = full.router.detach().clone().requires_grad_()
        w_in = full.w_in.detach()[mine].clone().requires_grad_()  # (E/P, h, f): my experts only
        w_out = full.w_out.detach()[mine].clone().requires_grad_()
        out, routing, aux = expert_parallel_forward(x, router, w_in, w_out, args.k, args.capacity_factor)
        objective(out, aux, env.rank).backward()
        dist.all_reduce(router.grad)  # the router is replicated: data-parallel gradient

        diffs = dict(output=max_abs_diff(out, ref_out), router_grad=max_abs_diff(router.grad, ref_grads["router"]),
                     w_in_grad=max_abs_diff(w_in.grad, ref_grads["w_in"][mine]),
                     w_out_grad=max_abs_diff(w_out.grad, ref_grads["w_out"][mine]))
        assert torch.equal(routing.expert, ref_routing.expert) and torch.equal(routing.kept, ref_routing.kept)
        for name, d in diffs.items():
            assert d < 1e-4, f"expert-parallel {name} differs from the single-process layer by {d:.2e}"
        routed, kept = routing.routed_per_expert(args.experts), routing.kept_per_expert(args.experts)
        say(f"rank {env.rank}: experts {mine.start}-{mine.stop - 1}, capacity {routing.capacity}, "
            f"routed {routed.tolist()}, kept {kept.tolist()}, max diff {max(diffs.values()):.1e}")
        emit(experts=args.experts, k=args.k, ep=env.world_size, tokens=args.tokens, capacity=routing.capacity,
             capacity_factor=args.capacity_factor, local_experts=list(range(mine.start, mine.stop)),
             routed=routed.tolist(), kept=kept.tolist(), dropped=int((~routing.kept).sum()),
             balance_loss=round(aux.item(), 4), diffs=diffs, backend=env.backend)


if __name__ == "__main__":
    main()
