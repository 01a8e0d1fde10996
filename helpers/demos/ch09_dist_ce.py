"""Chapter 9: Colossal-AI's vocabulary-parallel cross-entropy in bf16, near zero loss (CPU, gloo).

    torchrun --nproc_per_node 2 -m helpers.demos.ch09_dist_ce

With tensor parallelism, HybridParallelPlugin's Llama computes the loss on vocabulary-sharded
logits with ``colossalai.shardformer.layer.loss.cross_entropy_1d`` (``DistCrossEntropy``): it
exponentiates the bf16 logits in bf16 and saves the softmax, cast to bf16, for the backward pass,
whose gradient is softmax − one-hot. Each rank here holds half of a 64-word vocabulary; the
target's logit leads the others by a growing margin (the model becoming sure of a memorised
batch). The demo runs Colossal-AI's own function and compares its loss and the target logit's
gradient with PyTorch's cross-entropy on the whole logits in bf16 and in fp32 (the exact value
is p − 1; :mod:`helpers.train.ce_check`).
"""

import torch
import torch.distributed as dist

from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch09 import DistCeResult
from helpers.train.ce_check import TOKENS, VOCAB, logits_with_margin, torch_loss_and_target_grad


def main() -> None:
    p = cli.parser()
    p.add_argument("--margins", default="2,6,10,14,18")
    args = p.parse_args()
    with distributed(backend="gloo") as env:
        from colossalai.shardformer.layer.loss import cross_entropy_1d

        part = VOCAB // env.world_size
        mine = slice(env.rank * part, (env.rank + 1) * part)
        for margin in (float(m) for m in args.margins.split(",")):
            logits, target = logits_with_margin(margin)
            # (tokens, vocab/tp)
            local = logits.to(torch.bfloat16)[:, mine].clone().requires_grad_()
            loss = cross_entropy_1d(
                local,
                target,
                process_group=dist.group.WORLD,
                vocab_size=VOCAB,
                dtype=torch.bfloat16,
                mode="sum",
            )
            loss.backward()
            grads = [torch.empty_like(local.grad) for _ in range(env.world_size)]
            dist.all_gather(grads, local.grad.contiguous())
            full_grad = torch.cat(grads, dim=1).float()  # (tokens, vocab)
            exact_loss, exact = torch_loss_and_target_grad(logits.double(), target, torch.float64)
            bf16_loss, bf16 = torch_loss_and_target_grad(logits, target, torch.bfloat16)
            dist_target = full_grad[torch.arange(TOKENS), target].tolist()
            others = full_grad.clone()
            others[torch.arange(TOKENS), target] = 0
            if env.rank == 0:
                say(
                    f"margin {margin:4.0f}: loss exact {exact_loss:.3e}, "
                    f"Colossal-AI {loss.item():.3e}; "
                    f"target gradient exact {exact[0]:.2e}, PyTorch bf16 {bf16[0]:.2e}, "
                    f"Colossal-AI {dist_target[0]:.2e}"
                )
                emit(
                    DistCeResult,
                    margin=margin,
                    loss_exact=exact_loss,
                    loss_colossal=loss.item(),
                    loss_torch_bf16=bf16_loss,
                    target_grad_exact=exact,
                    target_grad_torch_bf16=bf16,
                    target_grad_colossal=dist_target,
                    other_grad_sum_colossal=others.sum(dim=1).tolist(),
                )


if __name__ == "__main__":
    main()
