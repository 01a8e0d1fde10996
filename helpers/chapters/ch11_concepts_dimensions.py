"""Chapter 11's prose questions on Chapters 1 and 2: the four dimensions and combining them.

Questions of Chapter 11 answered in prose (the numeric ones are in
:mod:`helpers.chapters.ch11_numeric_dimensions` and :mod:`helpers.chapters.ch11_numeric_costs`).
Each worked answer is what a good candidate says in two or three minutes; the link (the
``section``) is where the book derives or measures it.
"""

from __future__ import annotations

from helpers.chapters.ch11_interview import Question as Q

QUESTIONS = [
    # --- Chapter 1
    Q(
        "c1-four-ways",
        "01_dimensions",
        "basic",
        "Name the four basic ways to parallelise training and what each one splits.",
        "Data parallelism splits the batch (every rank holds the whole model); tensor parallelism "
        "splits the weight matrices inside a layer; pipeline parallelism splits the stack of "
        "layers into stages; sequence parallelism splits the token dimension of the activations. "
        "They are independent and stack: G = D·T·P (·S).",
        "A contractor with an order for a 100-storey villa",
    ),
    Q(
        "c1-dp-equivalence",
        "01_dimensions",
        "intermediate",
        "Why does data parallelism give the same gradient as training on the full batch, and when "
        "does it not?",
        "The loss is a mean over samples, so its gradient is the mean of per-sample gradients; "
        "averaging the D shard means (all-reduce, divide by D) gives the full-batch mean when "
        "shards are equal. It breaks when shards hold different numbers of tokens (average sums "
        "and counts instead), with batch statistics (BatchNorm sees only the local shard unless "
        "SyncBatchNorm is used), and in low precision the summation order changes the last bits.",
        "Why the averaged gradient is the full-batch gradient",
    ),
    Q(
        "c1-megatron-mlp",
        "01_dimensions",
        "intermediate",
        "In Megatron's MLP, why is the first matrix split by columns and the second by rows? What "
        "are f and g?",
        "Splitting A by columns lets every rank apply GeLU to its own slice of XA with no "
        "communication (GeLU is elementwise); the second matrix split by rows then takes that "
        "slice directly, and the partial products are summed with one all-reduce. f is the "
        "identity forward and an all-reduce backward (before the block); g is an all-reduce "
        "forward and the identity backward (after it). So one all-reduce per block forward and "
        "one backward.",
        "The conjugate operators f and g",
    ),
    Q(
        "c1-attention-tp",
        "01_dimensions",
        "intermediate",
        "How is self-attention split under tensor parallelism, and what constrains T?",
        "By heads: Q, K, V projections are column-parallel, so each rank computes whole heads; "
        "the output projection is row-parallel and ends in an all-reduce. T must divide the "
        "number of attention heads and of key-value heads (grouped-query attention leaves few KV "
        "heads, which caps T).",
        "Attention",
    ),
    Q(
        "c1-allreduce-decomp",
        "01_dimensions",
        "basic",
        "Why does a ring all-reduce send about twice the message size per rank?",
        "It is a reduce-scatter (each rank ends with the sum of one 1/N chunk) followed by an "
        "all-gather of the chunks; each phase sends (N−1)/N of the message, 2(N−1)/N in all, "
        "independent of N for large N.",
        "A contractor with an order for a 100-storey villa",
    ),
    Q(
        "c1-megatron-sp-vs-ulysses",
        "01_dimensions",
        "advanced",
        "How do Megatron-style sequence parallelism and DeepSpeed-Ulysses differ in what they "
        "split and what they send?",
        "Megatron SP lives inside the tensor group: it splits the sequence in the regions TP "
        "leaves replicated (norms, dropout) and replaces each all-reduce with an all-gather plus "
        "a reduce-scatter of the same volume, so it saves activation memory for free but cannot "
        "exceed T. Ulysses gives the sequence its own axis: all-to-alls turn a sequence split "
        "into a head split around attention (4 per layer forward), volume falling as 1/S; S must "
        "divide the head count.",
        "Ulysses: all-to-all across heads",
    ),
    Q(
        "c1-ring-attention",
        "01_dimensions",
        "advanced",
        "What does ring attention do that Ulysses cannot, and what does it need in Colossal-AI?",
        "It keeps every head on every rank and passes key/value blocks around a ring, "
        "accumulating attention with an online softmax, so S is not limited by the head count and "
        "very long sequences fit. Colossal-AI's ring_attn needs flash attention, and the sequence "
        "length must divide by 2S (load-balanced causal split).",
        "Ring attention",
    ),
    Q(
        "c1-gpt2-trap",
        "01_dimensions",
        "advanced",
        "A GPT-2 fine-tune under HybridParallelPlugin reaches a much lower loss than on one GPU. "
        "What do you suspect?",
        "A lost causal mask: without flash attention Colossal-AI's sharded GPT-2 builds a "
        "padding-only mask, and transformers' sdpa then turns is_causal off, so tokens see the "
        "future. The same family of bug hit Llama under sequence parallelism with sdpa. Always "
        "compare a parallel run with a single-GPU reference; a run that learns too well is a bug.",
        "A trap: the causal mask goes missing",
    ),
    # --- Chapter 2
    Q(
        "c2-axis-order",
        "02_combining",
        "intermediate",
        "In Colossal-AI's rank grid (dp, pp, tp), why is tp the fastest-varying axis?",
        "Consecutive ranks share a node, so putting tp last keeps every tensor-parallel group "
        "(which talks 4 times per layer) on NVLink; pipeline neighbours exchange only activations "
        "at stage boundaries and data-parallel groups one gradient all-reduce per step, so they "
        "can span nodes.",
        "Why this order",
    ),
    Q(
        "c2-seed-forgets",
        "02_combining",
        "intermediate",
        "The seed enumerates every (D, T, P) with D = G/(T·P) whole. What does it forget?",
        "Everything about the model and the library: T must divide attention and KV heads, P "
        "should divide the layers, pipelines need micro-batches ≥ stages and at most ZeRO-1, the "
        "global batch must split into whole micro-batches per data rank, an own sequence axis "
        "counts in G, and it says nothing about memory or speed.",
        "What the seed's enumeration forgets",
    ),
    Q(
        "c2-sp-in-g",
        "02_combining",
        "advanced",
        "Does the sequence-parallel degree count in G = D·T·P? Answer for each Colossal-AI mode.",
        "split_gather and ring reuse the tensor group (S = T): not counted, and setting sp_size "
        "is an error. all_to_all and ring_attn get an own axis, so G = D·T·P·S; ZeRO then shards "
        "over dp × sp.",
        "Where sequence parallelism fits",
    ),
]
