"""Chapter 9: a small Mixtral under MoeHybridParallelPlugin on GPUs (expert parallelism, ep=2).

    torchrun --nproc_per_node 2 -m helpers.demos.ch09_mixtral --ep 2
    torchrun --nproc_per_node 2 -m helpers.demos.ch09_mixtral --ep 1   # experts replicated

The model is transformers' MixtralForCausalLM from a MixtralConfig (random weights, nothing
downloaded, :func:`helpers.models.mixtral.mixtral`), 8 experts, top-2; the plugin and the loop:
:mod:`helpers.train.moe_plugin`. The plugin's constraints, from
colossalai/booster/plugin/moe_hybrid_parallel_plugin.py in 0.5.0: the data-parallel size
(world / (tp·pp·sp)) must be divisible by ep (``dp_size should be divisible by ep_size``);
zero_stage 2 (and overlap_communication) is turned into zero_stage 1 with a warning ("ZeRO-2 or
comm overlap cause program hang when some experts are not routed"); ZeRO needs fp16/bf16; the
number of experts must be divisible by ep (shardformer/modeling/mixtral.py). Its expert layer is
dropless: the token counts per expert are exchanged first, then an uneven all-to-all moves the
tokens (no capacity, unlike GShard and this chapter's from-scratch layer).

Every rank also trains a single-GPU reference on the first ``--ref_steps`` batches (mixed
precision as in Chapter 1); routing decisions can flip under bf16 rounding, so the comparison is
reported, not asserted.
"""

import copy

import torch

from helpers.models.llama import token_batch
from helpers.models.mixtral import expert_params, mixtral
from helpers.parallel.vocab import DTYPES
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch09 import MixtralResult
from helpers.train.moe_plugin import moe_plugin, parser, train_steps
from helpers.train.reference import train_reference_mixed


def main() -> None:
    args = parser().parse_args()
    with distributed(timeout_s=300) as env, cli.plugin_lifetime() as keep:
        cli.require_gpu(env, "MoeHybridParallelPlugin", "ZeRO and bf16 need CUDA")
        from colossalai.booster import Booster

        config, model = mixtral(args.layers, args.hidden, args.experts, 32000, args.seq, env.device)
        total, experts_total = sum(p.numel() for p in model.parameters()), expert_params(model)
        batches = [
            token_batch(k, args.batch, args.seq, config.vocab_size) for k in range(args.steps)
        ]
        on_device = [{k: v.to(env.device) for k, v in b.items()} for b in batches[: args.ref_steps]]
        reference = train_reference_mixed(
            copy.deepcopy(model), on_device, args.lr, DTYPES[args.precision]
        )
        del on_device
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(env.device)
        plugin = keep(moe_plugin(args))
        booster = Booster(plugin=plugin)
        dp_size = plugin.dp_size
        model, opt, _, _, _ = booster.boost(
            model, torch.optim.AdamW(model.parameters(), lr=args.lr)
        )
        local_experts = expert_params(model)  # after sharding: this rank's share of the experts
        values, seconds = train_steps(booster, model, opt, batches, dp_size, env.rank, env.device)
        diffs = [abs(a - b) for a, b in zip(values, reference)]
        tokens_per_s = args.batch * args.seq / seconds
        result = dict(
            ep=args.ep,
            dp=int(dp_size),
            moe_dp=int(plugin.moe_dp_size),
            zero=int(plugin.zero_stage),
            precision=args.precision,
            experts=args.experts,
            layers=args.layers,
            hidden=args.hidden,
            params=total,
            expert_params=experts_total,
            local_expert_params=local_experts,
            batch=args.batch,
            seq=args.seq,
            steps=args.steps,
            tokens_per_s=round(tokens_per_s),
            seconds_per_step=round(seconds, 4),
            peak_mib=round(torch.cuda.max_memory_allocated(env.device) / 2**20, 1),
            losses=[round(x, 4) for x in values],
            reference=[round(x, 4) for x in reference],
            max_diff=max(diffs),
            gpu=torch.cuda.get_device_name(env.device),
        )
        if env.rank == 0:
            say(
                f"Mixtral ep={args.ep} dp={dp_size} zero={plugin.zero_stage}: "
                f"loss {values[0]:.3f} → {values[-1]:.3f} "
                f"(reference {reference[0]:.3f} → {reference[-1]:.3f}), "
                f"{tokens_per_s:,.0f} tokens/s, "
                f"peak {result['peak_mib']:,.0f} MiB, "
                f"experts held {local_experts:,} of {experts_total:,}"
            )
            emit(MixtralResult, **result)
        del model, opt, booster


if __name__ == "__main__":
    main()
