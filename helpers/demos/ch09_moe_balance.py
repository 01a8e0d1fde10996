"""Chapter 9: a skewed router's load, and two ways to balance it, trained on expert-parallel ranks.

    torchrun --nproc_per_node 4 -m helpers.demos.ch09_moe_balance --runs none aux:0.01 bias:0.005

Every rank holds E/ep of the experts of one :class:`helpers.parallel.ep.MoELayer` (seeded, the same
on every rank) and trains the layer with plain SGD on its own fresh tokens of every step
(:func:`helpers.parallel.ep.toy_batch`: shifted by ``--skew`` along one direction, so the
router starts out preferring a few experts, and a fixed target to learn), through
:func:`helpers.parallel.ep.expert_parallel_forward` (routing, dispatch all-to-all, local experts,
combine all-to-all). Each run of ``--runs`` balances in one way:

* ``none``: the task loss alone;
* ``aux:W``: plus W times the Switch Transformer's auxiliary loss (Fedus et al. 2022, eq. 4);
* ``bias:G``: DeepSeek-V3's auxiliary-loss-free balancing (DeepSeek-AI 2024, §2.1.2): a bias per
  expert added to the router's probabilities for the top-k choice only, moved by G = γ after
  each step against the sign of the expert's load error, the load counted over the whole step
  (all ranks: one all-reduce of the counts).

Float64 throughout, so that the single-process reference
(:func:`helpers.chapters.ch09_moe_balance.reference`, every group in one process with the whole
layer) makes the very same routing decisions at every step. Each rank reports, per run and
step, its group's tokens routed to and kept by each expert, its task loss and auxiliary loss,
and the final bias.
"""

import torch
import torch.distributed as dist

from helpers.parallel.ep import (
    MoELayer,
    expert_capacity,
    expert_parallel_forward,
    toy_batch,
    update_bias,
)
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch09 import MoeBalanceResult


def parse_run(text: str) -> tuple[str, float]:
    """'none', 'aux:0.01' or 'bias:0.005' -> (method, coefficient)."""
    method, _, value = text.partition(":")
    if method not in ("none", "aux", "bias") or (method != "none") != bool(value):
        raise ValueError(f"a run is none, aux:WEIGHT or bias:GAMMA, not {text!r}")
    return method, float(value or 0)


def train(method: str, coef: float, args, rank: int, world: int) -> dict:
    """One run of ``args.steps`` steps; this rank's history."""
    local = args.experts // world
    mine = slice(rank * local, (rank + 1) * local)
    full = MoELayer(args.hidden, args.ffn, args.experts, args.k, args.capacity_factor)
    router = full.router.detach().clone().requires_grad_()
    w_in, w_out = (w.detach()[mine].clone().requires_grad_() for w in (full.w_in, full.w_out))
    bias = torch.zeros(args.experts)
    seen = {"routed": [], "kept": [], "loss": [], "aux": []}
    # [start: moe-balance-step]
    for step in range(args.steps):
        x, target = toy_batch(step, rank, world, args.tokens, args.hidden, args.skew)
        out, routing, aux = expert_parallel_forward(
            x, router, w_in, w_out, args.k, args.capacity_factor,
            bias=bias if method == "bias" else None,
        )  # fmt: skip
        task = ((out - target) ** 2).mean()
        (task + coef * aux if method == "aux" else task).backward()
        dist.all_reduce(router.grad)  # replicated: average over the ranks
        with torch.no_grad():
            for p, n in ((router, world), (w_in, world), (w_out, world)):
                p -= args.lr * p.grad / n  # experts: the all-to-all summed every rank's tokens
                p.grad = None
        load = routing.routed_per_expert(args.experts)
        whole = load.clone()
        dist.all_reduce(whole)  # the load of the whole step, all ranks' tokens
        if method == "bias":
            bias = update_bias(bias, whole, coef)
        # [end: moe-balance-step]
        seen["routed"].append(load.tolist())
        seen["kept"].append(routing.kept_per_expert(args.experts).tolist())
        seen["loss"].append(task.item())
        seen["aux"].append(aux.item())
    return {"method": method, "coef": coef, **seen, "bias": bias.tolist()}


def main() -> None:
    p = cli.parser(__doc__)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64, help="tokens per rank and step")
    cli.add(p, "hidden", 16)
    p.add_argument("--ffn", type=int, default=32)
    p.add_argument("--capacity_factor", type=float, default=1.0)
    p.add_argument("--skew", type=float, default=3.0)
    cli.add(p, "steps", 100)
    cli.add(p, "lr", 0.5)
    p.add_argument("--runs", nargs="+", default=["none", "aux:0.01", "aux:0.1", "bias:0.005"])
    args = p.parse_args()
    runs = [parse_run(r) for r in args.runs]
    torch.set_default_dtype(torch.float64)
    with distributed(backend="gloo") as env:
        if args.experts % env.world_size:
            raise ValueError(f"{args.experts} experts do not split over {env.world_size} ranks")
        done = [train(m, c, args, env.rank, env.world_size) for m, c in runs]
        cap = expert_capacity(args.tokens, args.experts, args.k, args.capacity_factor)
        for run in done:
            dropped = [sum(r) - sum(k) for r, k in zip(run["routed"], run["kept"])]
            say(
                f"rank {env.rank} {run['method']}:{run['coef']:g}: dropped "
                f"{dropped[0]} -> {dropped[-1]} of {args.k * args.tokens} choices (capacity {cap})"
            )
        emit(
            MoeBalanceResult,
            runs=done,
            world=env.world_size,
            **{k: getattr(args, k) for k in ("experts", "k", "tokens", "hidden", "ffn")},
            **{k: getattr(args, k) for k in ("capacity_factor", "skew", "steps", "lr")},
            capacity=cap,
        )


if __name__ == "__main__":
    main()
