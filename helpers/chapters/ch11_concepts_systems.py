"""Chapter 11's prose questions on Chapters 6 to 9: frameworks, memory, troubleshooting, demos.

Questions of Chapter 11 answered in prose (the numeric ones are in
:mod:`helpers.chapters.ch11_numeric_dimensions` and :mod:`helpers.chapters.ch11_numeric_costs`).
Each worked answer is what a good candidate says in two or three minutes; the link (the
``section``) is where the book derives or measures it.
"""

from __future__ import annotations

from helpers.chapters.ch11_interview import Question as Q

QUESTIONS = [
    # --- Chapter 6
    Q(
        "c6-choose",
        "06_frameworks",
        "basic",
        "When would you choose DeepSpeed, Megatron-LM or Colossal-AI?",
        "DeepSpeed when ZeRO sharding of a model that nearly fits is the main need; Megatron-LM "
        "for very large layers needing mature tensor/sequence parallelism at scale; Colossal-AI "
        "for data, tensor, pipeline and sequence parallelism plus ZeRO behind one plugin "
        "interface.",
        None,
    ),
    Q(
        "c6-same-ideas",
        "06_frameworks",
        "intermediate",
        "Name Colossal-AI's counterparts of DeepSpeed ZeRO and Megatron's parallel linear layers.",
        "LowLevelZeroPlugin (ZeRO-1/2) and GeminiPlugin (ZeRO-3-like chunks with offload) for "
        "ZeRO; Shardformer's Linear1D_Col/Linear1D_Row under HybridParallelPlugin for Megatron's "
        "column/row-parallel layers.",
        None,
    ),
    # --- Chapter 7
    Q(
        "c7-16-bytes",
        "07_memory",
        "basic",
        "Where do 16 bytes per parameter come from in mixed-precision Adam?",
        "2 B bf16 weights + 2 B bf16 gradients + 12 B fp32 (master weights 4, momentum 4, "
        "variance 4) = 16 B (ZeRO paper §3). fp32 Adam is also 16: 4 + 4 + 8.",
        "Where memory goes: the seed's 16 bytes",
    ),
    Q(
        "c7-zero-stages",
        "07_memory",
        "intermediate",
        "What do ZeRO stages 1, 2 and 3 shard, and what does each cost in communication?",
        "Stage 1 shards optimizer states, stage 2 also gradients (reduce-scatter instead of "
        "all-reduce), both at DDP's 2Ψ volume; stage 3 also the weights, gathered layer by layer "
        "in forward and backward: 3Ψ, 1.5× DDP.",
        "Where memory goes: the seed's 16 bytes",
    ),
    Q(
        "c7-loss-peak",
        "07_memory",
        "advanced",
        "Why is the loss computation often the memory peak of a small-model, large-vocabulary run?",
        "The logits are N × v (N tokens). Hugging Face's loss keeps an fp32 log-softmax (4Nv "
        "bytes) for backward, and the first step of backward adds the fp32 gradients of the NLL "
        "and of the log-softmax: 12Nv bytes before any parameter has a gradient. With v = 32 000 "
        "that rivals several decoder layers' activations; chunked or vocabulary-parallel "
        "cross-entropy avoids holding it whole.",
        "The loss is often the peak",
    ),
    Q(
        "c7-recompute-trade",
        "07_memory",
        "basic",
        "What does activation recomputation trade, and how much?",
        "It keeps only each layer's input (2·s·b·h bytes) and reruns the forward during backward: "
        "activation memory drops by about (34 + 5as/h)/2 per layer, and the step does about a "
        "third more FLOPs.",
        "The techniques side by side",
    ),
    Q(
        "c7-offload",
        "07_memory",
        "intermediate",
        "When does optimizer offload to CPU help, and what does it cost?",
        "When the 12 B/param optimizer states are what does not fit: they move to host memory and "
        "the Adam step runs on the CPU; it costs PCIe traffic and CPU time every step, so it "
        "suits models that barely fit, not speed.",
        "The techniques side by side",
    ),
    # --- Chapter 8
    Q(
        "c8-hang",
        "08_troubleshooting",
        "intermediate",
        "A 512-GPU job hangs at start-up. What do you check first?",
        "That every process agrees on the world: WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT on "
        "every node; nodes that did not start; firewalls on the rendezvous port. NCCL_DEBUG=INFO "
        "and TORCH_DISTRIBUTED_DEBUG=DETAIL show which rank is missing; shrink the job to find "
        "the bad node.",
        None,
    ),
    Q(
        "c8-timeout",
        "08_troubleshooting",
        "intermediate",
        "A collective times out after hours of training. How do you find the cause?",
        "Find the rank that stopped first (its traceback, an OOM or a hardware error in its log); "
        "a rank that skipped a collective (a condition on rank, a pipeline stage without the "
        "loss) makes the others wait; flaky links show up as one node always involved.",
        None,
    ),
    Q(
        "c8-one-variable",
        "08_troubleshooting",
        "basic",
        "How do you tune a layout's throughput?",
        "One variable at a time: change one degree or batch setting, watch throughput and memory "
        "together, keep the change only if it helps, and measure rather than trust a model.",
        None,
    ),
    # --- Chapter 9
    Q(
        "c9-syncbn",
        "09_quick_demos",
        "intermediate",
        "A ResNet trained with plain PyTorch DDP on 8 GPUs with 4 images each underperforms. Why, "
        "and the fix?",
        "BatchNorm statistics come from 4 images per GPU instead of the global batch: noisy. Use "
        "SyncBatchNorm (statistics all-reduced over the data group) or larger per-GPU batches. "
        "Colossal-AI's TorchDDPPlugin converts BatchNorm to SyncBatchNorm itself when it "
        "configures the model; plain DDP does not.",
        "One process, then two: no code changes",
    ),
    Q(
        "c9-scaling-rule",
        "09_quick_demos",
        "intermediate",
        "State the linear learning-rate scaling rule and its limit.",
        "Multiply the learning rate by k when the global batch grows k-fold, with a warm-up "
        "(Goyal et al. 2017); it breaks down beyond a critical batch size, where larger batches "
        "stop reducing the steps needed, and when the scaled rate passes the stability limit.",
        "The script and its options",
    ),
    Q(
        "c9-expert-parallel",
        "09_quick_demos",
        "intermediate",
        "How does expert parallelism move tokens, and what is the capacity factor for?",
        "Each rank holds some experts; after routing, an all-to-all sends tokens to their "
        "experts' ranks and another brings the outputs back. Capacity caps tokens per expert so "
        "buffers have a fixed size; overflow is dropped, and a load-balancing loss keeps routing "
        "even.",
        "Experts on other ranks",
    ),
    Q(
        "c9-nan",
        "09_quick_demos",
        "advanced",
        "A tp=2 bf16 run goes NaN near zero loss while ZeRO runs do not. How do you investigate?",
        "Reproduce it against a single-GPU reference on fresh batches, then vary one factor at a "
        "time (precision, tp, optimizer, loss kernel). The book runs Colossal-AI's "
        "vocabulary-parallel cross-entropy in bf16 on two CPU ranks: near zero loss the target "
        "logit's gradient rounds to exactly 0 while the others do not, one suspect; the GPU "
        "variants separate the rest. Computing the loss in fp32 is the usual guard.",
        "The tp=2 bf16 NaN",
    ),
    Q(
        "c10-sampler",
        "10_pitfalls",
        "basic",
        "With tp = 2, how must the data sampler be built?",
        "Over the data-parallel group: num_replicas = D, rank = the data rank. Tensor-parallel "
        "peers must see the same samples; sharding over the world gives them different ones.",
        "Sharding the dataloader by world",
    ),
    Q(
        "c10-pp-loss",
        "10_pitfalls",
        "basic",
        "Under pipeline parallelism, which rank should log the loss?",
        "The last stage: execute_pipeline returns loss None elsewhere. Log there, or broadcast "
        "the loss from the last stage of each pipeline group.",
        "Reading the loss on a rank that is not the last",
    ),
]
