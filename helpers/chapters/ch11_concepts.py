"""Chapter 11's interview questions answered in prose (the numeric ones are in :mod:`helpers.chapters.ch11_numeric`).

Each worked answer is what a good candidate says in two or three minutes; the link (the
``section``) is where the book derives or measures it.
"""

from __future__ import annotations

from helpers.chapters.ch11_interview import Question as Q

CONCEPTS = [
    # --- Chapter 1
    Q(
        "c1-four-ways",
        "01_dimensions",
        "basic",
        "Name the four basic ways to parallelise training and what each one splits.",
        "Data parallelism splits the batch (every rank holds the whole model); tensor parallelism splits the weight "
        "matrices inside a layer; pipeline parallelism splits the stack of layers into stages; sequence parallelism "
        "splits the token dimension of the activations. They are independent and stack: G = D·T·P (·S).",
        "A contractor with an order for a 100-storey villa",
    ),
    Q(
        "c1-dp-equivalence",
        "01_dimensions",
        "intermediate",
        "Why does data parallelism give the same gradient as training on the full batch, and when does it not?",
        "The loss is a mean over samples, so its gradient is the mean of per-sample gradients; averaging the D "
        "shard means (all-reduce, divide by D) gives the full-batch mean when shards are equal. It breaks when "
        "shards hold different numbers of tokens (average sums and counts instead), with batch statistics "
        "(BatchNorm sees only the local shard unless SyncBatchNorm is used), and in low precision the summation "
        "order changes the last bits.",
        "Why the averaged gradient is the full-batch gradient",
    ),
    Q(
        "c1-megatron-mlp",
        "01_dimensions",
        "intermediate",
        "In Megatron's MLP, why is the first matrix split by columns and the second by rows? What are f and g?",
        "Splitting A by columns lets every rank apply GeLU to its own slice of XA with no communication "
        "(GeLU is elementwise); the second matrix split by rows then takes that slice directly, and the partial "
        "products are summed with one all-reduce. f is the identity forward and an all-reduce backward (before "
        "the block); g is an all-reduce forward and the identity backward (after it). So one all-reduce per block "
        "forward and one backward.",
        "The conjugate operators f and g",
    ),
    Q(
        "c1-attention-tp",
        "01_dimensions",
        "intermediate",
        "How is self-attention split under tensor parallelism, and what constrains T?",
        "By heads: Q, K, V projections are column-parallel, so each rank computes whole heads; the output "
        "projection is row-parallel and ends in an all-reduce. T must divide the number of attention heads and of "
        "key-value heads (grouped-query attention leaves few KV heads, which caps T).",
        "Attention",
    ),
    Q(
        "c1-allreduce-decomp",
        "01_dimensions",
        "basic",
        "Why does a ring all-reduce send about twice the message size per rank?",
        "It is a reduce-scatter (each rank ends with the sum of one 1/N chunk) followed by an all-gather of the "
        "chunks; each phase sends (N−1)/N of the message, 2(N−1)/N in all, independent of N for large N.",
        "A contractor with an order for a 100-storey villa",
    ),
    Q(
        "c1-megatron-sp-vs-ulysses",
        "01_dimensions",
        "advanced",
        "How do Megatron-style sequence parallelism and DeepSpeed-Ulysses differ in what they split and what they send?",
        "Megatron SP lives inside the tensor group: it splits the sequence in the regions TP leaves replicated "
        "(norms, dropout) and replaces each all-reduce with an all-gather plus a reduce-scatter of the same "
        "volume, so it saves activation memory for free but cannot exceed T. Ulysses gives the sequence its own "
        "axis: all-to-alls turn a sequence split into a head split around attention (4 per layer forward), "
        "volume falling as 1/S; S must divide the head count.",
        "Ulysses: all-to-all across heads",
    ),
    Q(
        "c1-ring-attention",
        "01_dimensions",
        "advanced",
        "What does ring attention do that Ulysses cannot, and what does it need in Colossal-AI?",
        "It keeps every head on every rank and passes key/value blocks around a ring, accumulating attention with "
        "an online softmax, so S is not limited by the head count and very long sequences fit. Colossal-AI's "
        "ring_attn needs flash attention, and the sequence length must divide by 2S (load-balanced causal split).",
        "Ring attention",
    ),
    Q(
        "c1-gpt2-trap",
        "01_dimensions",
        "advanced",
        "A GPT-2 fine-tune under HybridParallelPlugin reaches a much lower loss than on one GPU. What do you suspect?",
        "A lost causal mask: without flash attention Colossal-AI's sharded GPT-2 builds a padding-only mask, and "
        "transformers' sdpa then turns is_causal off, so tokens see the future. The same family of bug hit Llama "
        "under sequence parallelism with sdpa. Always compare a parallel run with a single-GPU reference; a run "
        "that learns too well is a bug.",
        "A trap: GPT-2 loses its causal mask",
    ),
    # --- Chapter 2
    Q(
        "c2-axis-order",
        "02_combining",
        "intermediate",
        "In Colossal-AI's rank grid (dp, pp, tp), why is tp the fastest-varying axis?",
        "Consecutive ranks share a node, so putting tp last keeps every tensor-parallel group (which talks 4 times "
        "per layer) on NVLink; pipeline neighbours exchange only activations at stage boundaries and data-parallel "
        "groups one gradient all-reduce per step, so they can span nodes.",
        "Why this order",
    ),
    Q(
        "c2-seed-forgets",
        "02_combining",
        "intermediate",
        "The seed enumerates every (D, T, P) with D = G/(T·P) whole. What does it forget?",
        "Everything about the model and the library: T must divide attention and KV heads, P should divide the "
        "layers, pipelines need micro-batches ≥ stages and at most ZeRO-1, the global batch must split into "
        "whole micro-batches per data rank, an own sequence axis counts in G, and it says nothing about memory or "
        "speed.",
        "What the seed's enumeration forgets",
    ),
    Q(
        "c2-sp-in-g",
        "02_combining",
        "advanced",
        "Does the sequence-parallel degree count in G = D·T·P? Answer for each Colossal-AI mode.",
        "split_gather and ring reuse the tensor group (S = T): not counted, and setting sp_size is an error. "
        "all_to_all and ring_attn get an own axis, so G = D·T·P·S; ZeRO then shards over dp × sp.",
        "Where sequence parallelism fits",
    ),
    # --- Chapter 3
    Q(
        "c3-tp-in-node",
        "03_strategy",
        "basic",
        "Why does tensor parallelism stay inside a node while pipeline parallelism may cross nodes?",
        "TP sends 4 all-reduces of b·s·h per layer on the critical path: over NVLink (hundreds of GB/s) that is "
        "affordable, over a 50 GB/s network it is about 9× slower. PP sends one activation per stage boundary per "
        "micro-batch, point to point, and data parallelism one all-reduce per step that overlaps the backward.",
        "Step 2: the hardware — what a collective costs on each link",
    ),
    Q(
        "c3-half-rule",
        "03_strategy",
        "intermediate",
        "The communication share of a step is above 0.5. What does the guide recommend, and does it always work?",
        "Lower the tensor-parallel degree, raise the batch so computation grows, or overlap communication with "
        "computation. Measured in the book, lowering TP cut the share and raised throughput (its four all-reduces "
        "per layer sit on the critical path); a bigger batch barely moved TP's share, because its communication "
        "grows with the batch too, though it raised throughput; and DDP's overlap was worse than one all-reduce "
        "after a short backward. A remedy works only where the communication is exposed and there is enough "
        "computation to hide it.",
        "Step 3: is communication the bottleneck? The 0.5 rule, measured",
    ),
    Q(
        "c3-score-misleads",
        "03_strategy",
        "advanced",
        "Where does the guide's recommend, scoring layouts by (T−1) + (P−1)/2, mislead?",
        "It ranks first a layout that by its own 16 B/param estimate does not fit (and knows no ZeRO, which would "
        "make it fit); data parallelism costs nothing in the score although the gradient all-reduce crosses "
        "nodes every step; a pipeline counts as half a tensor degree although its cost is the bubble, which "
        "depends on the micro-batches; and topology is missing: T = 8 inside a node and across nodes score the same.",
        "The guide's planner and where its score misleads",
    ),
    Q(
        "c3-alpha-beta",
        "03_strategy",
        "advanced",
        "Why does a pure α-β model mispredict small collectives, and how does the book fix it?",
        "For small messages the time is set by the host issuing calls and launching kernels, not by the link; "
        "back-to-back collectives cost at least that host floor. The book fits a per-collective floor from "
        "messages under 1 MiB and one link from the large all-reduces.",
        "Calibrated on NCCL",
    ),
    # --- Chapter 4
    Q(
        "c4-config-rules",
        "04_config",
        "intermediate",
        "Which rules should a training config's validator enforce before any GPU is touched?",
        "The degrees multiply to the world size, T divides the heads, P divides the layers, micro-batches ≥ P, "
        "ZeRO ≤ 1 with a pipeline, the global batch splits into whole micro-batches per data rank, the sequence "
        "mode's own constraints; and every error names the field and a fix.",
        "The rules, and who would complain otherwise",
    ),
    Q(
        "c4-validate-small",
        "04_config",
        "basic",
        "Why validate a configuration small before scaling it up?",
        "A scaled-down copy (same code paths, fewer GPUs and layers) fails in minutes on the same bugs — config "
        "errors, shape mismatches, checkpoint paths — that would waste a cluster allocation; only the degrees and "
        "the model size change on the way up.",
        "Validate small, then scale",
    ),
    Q(
        "c4-legacy",
        "04_config",
        "basic",
        "What replaces the legacy colossalai.launch(config=...) with a config.py?",
        "The Booster API: build a plugin (TorchDDP, LowLevelZero, Gemini, HybridParallel) from the settings, then "
        "booster.boost(model, optimizer, ...). The book migrates a legacy config.py into its YAML schema.",
        "Migrating a legacy `config.py`",
    ),
    # --- Chapter 5
    Q(
        "c5-torchrun",
        "05_launch",
        "basic",
        "What do torchrun and colossalai run do, and what must agree across nodes?",
        "torchrun starts nproc_per_node workers and sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT; "
        "colossalai run starts one torchrun per host of a hostfile over ssh. Every node needs the same nnodes, "
        "rendezvous address and port, its own node_rank, and the same code and data.",
        "Launching with torchrun",
    ),
    Q(
        "c5-checkpoint",
        "05_launch",
        "intermediate",
        "What must a checkpoint contain for an exact resume?",
        "Weights, optimizer state (moments, step), LR scheduler, the step, every RNG state on every rank (python, "
        "numpy, torch, CUDA) and the data position (epoch, batches taken); and the layout it was saved with, "
        "since each rank's RNG and data slice depend on it.",
        "What a resumable checkpoint holds",
    ),
    Q(
        "c5-atomic",
        "05_launch",
        "advanced",
        "How do you make checkpoints safe against a rank dying mid-save?",
        "Write into a temporary folder, barrier (Colossal-AI's save_* end without one), let rank 0 write the "
        "metadata last and rename the folder atomically; loaders ignore temporary folders, and old checkpoints "
        "are pruned only after the new one is published.",
        "What a resumable checkpoint holds",
    ),
    Q(
        "c5-signals",
        "05_launch",
        "intermediate",
        "Which three signals do you watch while training, and why each?",
        "Throughput (tokens/s, MFU) says whether the layout performs; memory (peak allocated) says how close to "
        "OOM and whether a larger batch fits; the communication share says whether ranks wait on the network. "
        "Together they point to which knob to turn.",
        "The three signals",
    ),
    Q(
        "c5-reshard",
        "05_launch",
        "advanced",
        "Can you resume a tp=2 checkpoint on dp=2? What changes?",
        "Yes, if the checkpoint stores full tensors (Colossal-AI's sharded checkpoints do) and the global batch and "
        "seed stay; the new layout loads them, but ranks are re-seeded, so the run continues correctly, not "
        "bit-identically.",
        "On GPUs: HybridParallelPlugin, sharded checkpoints, another layout",
    ),
    # --- Chapter 6
    Q(
        "c6-choose",
        "06_frameworks",
        "basic",
        "When would you choose DeepSpeed, Megatron-LM or Colossal-AI?",
        "DeepSpeed when ZeRO sharding of a model that nearly fits is the main need; Megatron-LM for very large "
        "layers needing mature tensor/sequence parallelism at scale; Colossal-AI for data, tensor, pipeline and "
        "sequence parallelism plus ZeRO behind one plugin interface.",
        None,
    ),
    Q(
        "c6-same-ideas",
        "06_frameworks",
        "intermediate",
        "Name Colossal-AI's counterparts of DeepSpeed ZeRO and Megatron's parallel linear layers.",
        "LowLevelZeroPlugin (ZeRO-1/2) and GeminiPlugin (ZeRO-3-like chunks with offload) for ZeRO; "
        "Shardformer's Linear1D_Col/Linear1D_Row under HybridParallelPlugin for Megatron's column/row-parallel "
        "layers.",
        None,
    ),
    # --- Chapter 7
    Q(
        "c7-16-bytes",
        "07_memory",
        "basic",
        "Where do 16 bytes per parameter come from in mixed-precision Adam?",
        "2 B bf16 weights + 2 B bf16 gradients + 12 B fp32 (master weights 4, momentum 4, variance 4) = 16 B "
        "(ZeRO paper §3). fp32 Adam is also 16: 4 + 4 + 8.",
        "Where memory goes: the seed's 16 bytes",
    ),
    Q(
        "c7-zero-stages",
        "07_memory",
        "intermediate",
        "What do ZeRO stages 1, 2 and 3 shard, and what does each cost in communication?",
        "Stage 1 shards optimizer states, stage 2 also gradients (reduce-scatter instead of all-reduce), both at "
        "DDP's 2Ψ volume; stage 3 also the weights, gathered layer by layer in forward and backward: 3Ψ, 1.5× DDP.",
        "Where memory goes: the seed's 16 bytes",
    ),
    Q(
        "c7-loss-peak",
        "07_memory",
        "advanced",
        "Why is the loss computation often the memory peak of a small-model, large-vocabulary run?",
        "The logits are N × v (N tokens). Hugging Face's loss keeps an fp32 log-softmax (4Nv bytes) for backward, "
        "and the first step of backward adds the fp32 gradients of the NLL and of the log-softmax: 12Nv bytes "
        "before any parameter has a gradient. With v = 32 000 that rivals several decoder layers' activations; "
        "chunked or vocabulary-parallel cross-entropy avoids holding it whole.",
        "The loss is often the peak",
    ),
    Q(
        "c7-recompute-trade",
        "07_memory",
        "basic",
        "What does activation recomputation trade, and how much?",
        "It keeps only each layer's input (2·s·b·h bytes) and reruns the forward during backward: activation "
        "memory drops by about (34 + 5as/h)/2 per layer, and the step does about a third more FLOPs.",
        "The techniques side by side",
    ),
    Q(
        "c7-offload",
        "07_memory",
        "intermediate",
        "When does optimizer offload to CPU help, and what does it cost?",
        "When the 12 B/param optimizer states are what does not fit: they move to host memory and the Adam step "
        "runs on the CPU; it costs PCIe traffic and CPU time every step, so it suits models that barely fit, "
        "not speed.",
        "The techniques side by side",
    ),
    # --- Chapter 8
    Q(
        "c8-hang",
        "08_troubleshooting",
        "intermediate",
        "A 512-GPU job hangs at start-up. What do you check first?",
        "That every process agrees on the world: WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT on every node; "
        "nodes that did not start; firewalls on the rendezvous port. NCCL_DEBUG=INFO and "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL show which rank is missing; shrink the job to find the bad node.",
        None,
    ),
    Q(
        "c8-timeout",
        "08_troubleshooting",
        "intermediate",
        "A collective times out after hours of training. How do you find the cause?",
        "Find the rank that stopped first (its traceback, an OOM or a hardware error in its log); a rank that "
        "skipped a collective (a condition on rank, a pipeline stage without the loss) makes the others wait; "
        "flaky links show up as one node always involved.",
        None,
    ),
    Q(
        "c8-one-variable",
        "08_troubleshooting",
        "basic",
        "How do you tune a layout's throughput?",
        "One variable at a time: change one degree or batch setting, watch throughput and memory together, keep "
        "the change only if it helps, and measure rather than trust a model.",
        None,
    ),
    # --- Chapter 9
    Q(
        "c9-syncbn",
        "09_quick_demos",
        "intermediate",
        "A ResNet trained with plain PyTorch DDP on 8 GPUs with 4 images each underperforms. Why, and the fix?",
        "BatchNorm statistics come from 4 images per GPU instead of the global batch: noisy. Use SyncBatchNorm "
        "(statistics all-reduced over the data group) or larger per-GPU batches. Colossal-AI's TorchDDPPlugin "
        "converts BatchNorm to SyncBatchNorm itself when it configures the model; plain DDP does not.",
        "One process, then two: no code changes",
    ),
    Q(
        "c9-scaling-rule",
        "09_quick_demos",
        "intermediate",
        "State the linear learning-rate scaling rule and its limit.",
        "Multiply the learning rate by k when the global batch grows k-fold, with a warm-up (Goyal et al. 2017); it "
        "breaks down beyond a critical batch size, where larger batches stop reducing the steps needed, and when "
        "the scaled rate passes the stability limit.",
        "The script and its options",
    ),
    Q(
        "c9-expert-parallel",
        "09_quick_demos",
        "intermediate",
        "How does expert parallelism move tokens, and what is the capacity factor for?",
        "Each rank holds some experts; after routing, an all-to-all sends tokens to their experts' ranks and "
        "another brings the outputs back. Capacity caps tokens per expert so buffers have a fixed size; overflow "
        "is dropped, and a load-balancing loss keeps routing even.",
        "Experts on other ranks",
    ),
    Q(
        "c9-nan",
        "09_quick_demos",
        "advanced",
        "A tp=2 bf16 run goes NaN near zero loss while ZeRO runs do not. How do you investigate?",
        "Reproduce it against a single-GPU reference on fresh batches, then vary one factor at a time (precision, "
        "tp, optimizer, loss kernel). The book runs Colossal-AI's vocabulary-parallel cross-entropy in bf16 on "
        "two CPU ranks: near zero loss the target logit's gradient rounds to exactly 0 while the others do not, "
        "one suspect; the GPU variants separate the rest. Computing the loss in fp32 is the usual guard.",
        "The tp=2 bf16 NaN",
    ),
    Q(
        "c10-sampler",
        "10_pitfalls",
        "basic",
        "With tp = 2, how must the data sampler be built?",
        "Over the data-parallel group: num_replicas = D, rank = the data rank. Tensor-parallel peers must see the "
        "same samples; sharding over the world gives them different ones.",
        "Sharding the dataloader by world",
    ),
    Q(
        "c10-pp-loss",
        "10_pitfalls",
        "basic",
        "Under pipeline parallelism, which rank should log the loss?",
        "The last stage: execute_pipeline returns loss None elsewhere. Log there, or broadcast the loss from the "
        "last stage of each pipeline group.",
        "Reading the loss on a rank that is not the last",
    ),
]
