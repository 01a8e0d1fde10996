"""Chapter 9: a small Mixtral under MoeHybridParallelPlugin on GPUs (expert parallelism, ep=2).

    torchrun --nproc_per_node 2 -m helpers.demos.ch09_mixtral --ep 2
    torchrun --nproc_per_node 2 -m helpers.demos.ch09_mixtral --ep 1   # experts replicated: compare memory

The model is transformers' MixtralForCausalLM from a MixtralConfig (random weights, nothing
downloaded), 8 experts, top-2. The plugin's constraints, from
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

import argparse
import copy
import time

import torch
import torch.distributed as dist

from helpers.demos.ch01_hybrid import DTYPES, train_reference_mixed
from helpers.run.env import distributed, emit, say, sync
from helpers.models.llama import shard_batch, token_batch


def mixtral(layers: int, hidden: int, experts: int, vocab: int, seq: int, device):
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        num_local_experts=experts,
        num_experts_per_tok=2,
        max_position_embeddings=seq,
        tie_word_embeddings=False,
        attn_implementation="eager",
        use_cache=False,
        output_router_logits=False,
    )
    torch.manual_seed(0)
    with torch.device(device):
        return config, MixtralForCausalLM(config)


def expert_params(model) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)


def parser() -> argparse.ArgumentParser:
    """The command line (the recorder's tests parse its run lists with it)."""
    p = argparse.ArgumentParser()
    p.add_argument("--ep", type=int, default=2)
    p.add_argument("--zero", type=int, default=1)
    p.add_argument("--precision", choices=["bf16", "fp16"], default="bf16")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--batch", type=int, default=16, help="global batch")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--ref_steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-4)
    return p


def main() -> None:
    args = parser().parse_args()
    with distributed(timeout_s=300) as env:
        if not env.is_gpu:
            raise SystemExit(
                "MoeHybridParallelPlugin needs CUDA GPUs (ZeRO, bf16) in Colossal-AI 0.5.0"
            )
        from colossalai.booster import Booster
        from colossalai.booster.plugin import MoeHybridParallelPlugin

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
        plugin = MoeHybridParallelPlugin(
            tp_size=1,
            pp_size=1,
            ep_size=args.ep,
            zero_stage=args.zero,
            precision=args.precision,
            max_norm=0.0,
        )
        booster = Booster(plugin=plugin)
        dp_size = plugin.dp_size
        model, opt, _, _, _ = booster.boost(
            model, torch.optim.AdamW(model.parameters(), lr=args.lr)
        )
        local_experts = expert_params(model)  # after sharding: this rank's share of the experts
        losses, start = [], None
        for k, full in enumerate(batches):
            if k == 2:
                sync(env.device)
                start = time.perf_counter()
            batch = {
                n: t.to(env.device)
                for n, t in shard_batch(full, env.rank % dp_size, dp_size).items()
            }
            loss = model(**batch).loss
            booster.backward(loss, opt)
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach().float().clone())
        sync(env.device)
        seconds = (time.perf_counter() - start) / (len(batches) - 2)
        values = torch.stack(losses)
        dist.all_reduce(values)
        values = (values / env.world_size).tolist()
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
                f"Mixtral ep={args.ep} dp={dp_size} zero={plugin.zero_stage}: loss {values[0]:.3f} → {values[-1]:.3f} "
                f"(reference {reference[0]:.3f} → {reference[-1]:.3f}), {tokens_per_s:,.0f} tokens/s, "
                f"peak {result['peak_mib']:,.0f} MiB, experts held {local_experts:,} of {experts_total:,}"
            )
            emit(**result)
        del model, opt, booster
        del plugin


if __name__ == "__main__":
    main()
