"""Chapter 9: expert parallelism from scratch, checked against a single-process MoE layer.

    torchrun --nproc_per_node 2 -m helpers.demos.ch09_moe --experts 4 --k 2 --capacity_factor 1.0
    torchrun --nproc_per_node 4 -m helpers.demos.ch09_moe --dp 2     # ep 2 in each of 2 replicas

The world is a dp × ep grid (:func:`helpers.parallel.ep.expert_data_grid`, ``--dp`` replicas, ep =
world / dp). Every rank builds the same full :class:`helpers.parallel.ep.MoELayer` (seeded) as the
reference, keeps only its E/ep experts for the parallel layer, and routes its own tokens. The
parallel forward (:func:`helpers.parallel.ep.expert_parallel_forward` over the rank's expert group:
dispatch, all-to-all, local experts, all-to-all back, combine) must give the reference's outputs
for this rank's tokens. The objective is the mean of every rank's loss, as in data parallelism,
so after one backward: the router, replicated on every rank, gets its gradient averaged over all
ranks; an expert's gradient, which the all-to-all's backward has already summed over the ep ranks
whose tokens it served, is divided by ep (Colossal-AI's EPGradScalerIn does the same) and averaged
over its data group (:mod:`helpers.train.moe_check`). Both must equal the reference's gradients.
The load per expert (tokens routed, kept within the capacity, dropped) is reported from every
rank, and so are the bytes the all-to-alls handed to gloo for each peer, forward and backward
(:class:`helpers.parallel.ep.PeerBytes`, against :func:`helpers.cost.moe.dispatch_bytes`), and the
bytes of the tensors autograd saved in the layer's forward (against the capacity buffers of
:func:`helpers.cost.moe.moe_memory`).
"""

import torch
import torch.distributed as dist

from helpers.parallel.ep import MoELayer, PeerBytes, expert_data_grid, expert_parallel_forward
from helpers.run import cli
from helpers.run.env import distributed, emit, max_abs_diff, say
from helpers.run.result_types.ch09 import MoeResult
from helpers.train.moe_check import average_grads, group_tokens, objective, reference_grads


def main() -> None:
    p = cli.parser()
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--tokens", type=int, default=32, help="tokens per rank")
    cli.add(p, "hidden", 16)
    p.add_argument("--ffn", type=int, default=32)
    p.add_argument("--capacity_factor", type=float, default=1.0)
    p.add_argument("--skew", type=float, default=0.0)
    p.add_argument("--dp", type=int, default=1, help="data-parallel replicas; ep = world / dp")
    args = p.parse_args()
    with distributed(backend="gloo") as env:
        ep_groups, dp_groups = expert_data_grid(env.world_size, env.world_size // args.dp)
        ep = len(ep_groups[0])
        if env.world_size != ep * args.dp or args.experts % ep:
            raise ValueError(
                f"{env.world_size} ranks, --dp {args.dp}, {args.experts} experts: "
                "need world = dp·ep "
                "and experts divisible by ep"
            )
        ep_rank, dp_rank = env.rank % ep, env.rank // ep
        # every rank creates every group, in the same order (torch.distributed requires it)
        ep_group = [dist.new_group(g) for g in ep_groups][dp_rank]
        dp_group = [dist.new_group(g) for g in dp_groups][ep_rank]
        local = args.experts // ep
        mine = slice(ep_rank * local, (ep_rank + 1) * local)
        full = MoELayer(args.hidden, args.ffn, args.experts, args.k, args.capacity_factor)
        x = group_tokens(env.rank, args.tokens, args.hidden, args.skew)

        # reference: the whole layer in one process on every rank's tokens (one GShard group each)
        ref_out, ref_routing, ref_aux = full(x)
        objective(ref_out, ref_aux, env.rank).backward()
        ref_grads = reference_grads(full, env.world_size)

        router = full.router.detach().clone().requires_grad_()
        w_in = full.w_in.detach()[mine].clone().requires_grad_()  # (E/ep, h, f): my experts only
        w_out = full.w_out.detach()[mine].clone().requires_grad_()
        # [start: moe-count]
        saved = []  # bytes of every tensor autograd keeps for the backward of the layer
        hooks = torch.autograd.graph.saved_tensors_hooks(
            lambda t: saved.append(t.numel() * t.element_size()) or t, lambda t: t
        )
        with PeerBytes() as sent:  # what the all-to-alls hand to gloo for each peer
            with hooks:  # x needs its gradient, as inside a model: both backward all-to-alls
                out, routing, aux = expert_parallel_forward(
                    x.requires_grad_(), router, w_in, w_out, args.k, args.capacity_factor, ep_group
                )
            sent.phase = "backward"
            objective(out, aux, env.rank).backward()
        # [end: moe-count]
        average_grads(router, (w_in, w_out), ep, args.dp, dp_group, env.world_size)

        diffs = dict(
            output=max_abs_diff(out, ref_out),
            router_grad=max_abs_diff(router.grad, ref_grads["router"]),
            w_in_grad=max_abs_diff(w_in.grad, ref_grads["w_in"][mine]),
            w_out_grad=max_abs_diff(w_out.grad, ref_grads["w_out"][mine]),
        )
        assert torch.equal(routing.expert, ref_routing.expert) and torch.equal(
            routing.kept, ref_routing.kept
        )
        for name, d in diffs.items():
            assert d < 1e-4, (
                f"expert-parallel {name} differs from the single-process layer by {d:.2e}"
            )
        routed = routing.routed_per_expert(args.experts)
        kept = routing.kept_per_expert(args.experts)
        say(
            f"rank {env.rank} (dp {dp_rank}, ep {ep_rank}): experts {mine.start}-{mine.stop - 1}, "
            f"capacity "
            f"{routing.capacity}, routed {routed.tolist()}, kept {kept.tolist()}, "
            f"max diff {max(diffs.values()):.1e}"
        )
        emit(
            MoeResult,
            experts=args.experts,
            k=args.k,
            ep=ep,
            dp=args.dp,
            ep_rank=ep_rank,
            dp_rank=dp_rank,
            tokens=args.tokens,
            capacity=routing.capacity,
            capacity_factor=args.capacity_factor,
            local_experts=list(range(mine.start, mine.stop)),
            routed=routed.tolist(),
            kept=kept.tolist(),
            dropped=int((~routing.kept).sum()),
            balance_loss=round(aux.item(), 4),
            diffs=diffs,
            backend=env.backend,
            hidden=args.hidden,
            ffn=args.ffn,
            element_size=x.element_size(),
            sent=sent.sent,  # {phase: bytes to each ep peer}
            all_to_alls=sent.calls,
            saved_bytes=sum(saved),
        )


if __name__ == "__main__":
    main()
