"""Chapter 12's published trainings: each layout and figure as its paper gives it, with the source.

Used by ``notebooks/12_in_practice.ipynb`` and ``tests/test_ch12_published.py``. Every number in
:data:`RUNS` is typed from the cited table or section (the tests re-check what the papers
themselves make checkable: G = T·C·P·D, aggregate = per-GPU × G, % of peak); a layout field the
source does not give is ``None``, and what the chapter *assumes* in its place is in
``assumed``, never mixed with the published figures. Sources:

* MEG: Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM" (SC '21), Table 1; §5.1: vocabulary 51,200, sequence 2,048, mixed precision, 80-GB
  A100s on Selene; TFLOP/s counted with eq. (3), recomputation included.
* L3: Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3 (405B: 126 layers, width 16,384,
  FFN 53,248, 128 heads, 8 KV heads, vocabulary 128,000), Table 4 (the 405B layouts and their
  TFLOP/s and BF16 MFU), §3.3.2 (4D parallelism: TP, CP, PP, FSDP; interleaved pipeline with one
  layer fewer on the first and last stage; K, V all-gathered for CP).
* DSV3: DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", §3.2 (16-way PP with DualPipe, 64-way
  EP over 8 nodes, ZeRO-1 DP, no TP), §3.3 (FP8 mixed precision), §4.2 (61 layers, width 7,168,
  batch ramped to 15,360 sequences of 4K tokens), §1 (180K H800 GPU hours per trillion tokens on
  2,048 H800s); the dense FFN width (18,432) and the vocabulary (129,280; the report says 128K)
  are the released ``config.json``'s.
* BLOOM: Le Scao et al. 2022 (BigScience), "BLOOM: A 176B-Parameter Open-Access Multilingual
  Language Model", Table 3 (70 layers, width 14,336, 112 heads, sequence 2,048, global batch
  2,048), §3.4 (384 A100 80 GB, DP 8 × TP 4 × PP 12, ZeRO stage 1, bf16, 156 TFLOP/s per GPU in
  the fastest configuration); memory "about 60 GB per GPU": BigScience's training summary
  ("BigScience 176B Model", bigscience.notion.site).
* OPT: Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language Models", Table 1 (175B: 96
  layers, 96 heads, width 12,288, batch 2M tokens), §2.4 (992 A100 80 GB, FSDP with Megatron-LM
  tensor parallelism, up to 147 TFLOP/s per GPU; the tensor degree is not given); the vocabulary
  of 50,272 is the released checkpoints' (GPT-2's BPE padded).
* ALPACA: Taori et al. 2023, "Stanford Alpaca", the repository's README ("Fine-tuning"): LLaMA-7B
  on 4 A100 80 GB, FSDP ``full_shard``, bf16, batch 4 per device × 8 accumulation steps = 128,
  max length 512; no throughput is published.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helpers.config.shape import ModelShape
from helpers.cost.hardware import GPU_KIND
from helpers.cost.moe import MoEShape

SOURCES = {
    "MEG": "Narayanan et al. 2021 (Megatron-LM, SC '21), Table 1 and §5.1",
    "L3": "Dubey et al. 2024 (The Llama 3 Herd of Models), Tables 3-4 and §3.3.2",
    "DSV3": "DeepSeek-AI 2024 (DeepSeek-V3 Technical Report), §1, §3.2-3.3, §4.2",
    "BLOOM": "Le Scao et al. 2022 (BLOOM), Table 3 and §3.4",
    "OPT": "Zhang et al. 2022 (OPT), Table 1 and §2.4",
    "ALPACA": "Taori et al. 2023 (Stanford Alpaca), README 'Fine-tuning'",
}


@dataclass(frozen=True)
class Run:
    """One published training (or one row of a published table)."""

    key: str
    training: str  # the family: "Megatron-LM Table 1", "Llama 3 405B", ...
    source: str  # a key of SOURCES
    model: object  # ModelShape or MoEShape: the published architecture
    cluster: str  # a preset of helpers.cost.hardware
    gpus: int
    tp: int | None
    pp: int | None
    dp: int | None
    global_batch: int | None  # sequences per step
    seq: int
    cp: int = 1
    ep: int = 1
    sharding: str = "none"  # how the data-parallel group shards: none, ZeRO-1, FSDP, ...
    schedule: str = ""
    precision: str = "bf16"
    micro_batch: int | None = None
    reported: dict = field(default_factory=dict)  # figure name -> value, as published
    counting: str = ""  # how the paper counts its throughput
    assumed: dict = field(default_factory=dict)  # what the chapter assumes where nothing is given


def _gpt(params_b: str, layers: int, hidden: int, heads: int) -> ModelShape:
    return ModelShape.gpt(layers, hidden, heads, vocab=51200, seq_len=2048, name=f"GPT {params_b}")


# Table 1 of Narayanan et al. 2021: (params, heads, hidden, layers, t, p, GPUs, batch,
# TFLOP/s per GPU, % of peak, aggregate PFLOP/s)
MEGATRON_TABLE1 = [
    ("1.7B", 24, 2304, 24, 1, 1, 32, 512, 137, 44, 4.4),
    ("3.6B", 32, 3072, 30, 2, 1, 64, 512, 138, 44, 8.8),
    ("7.5B", 32, 4096, 36, 4, 1, 128, 512, 142, 46, 18.2),
    ("18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135, 43, 34.6),
    ("39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138, 44, 70.8),
    ("76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140, 45, 143.8),
    ("145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148, 47, 227.1),
    ("310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155, 50, 297.4),
    ("529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163, 52, 410.2),
    ("1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 163, 52, 502.0),
]


def _megatron() -> list[Run]:
    runs = []
    for name, heads, h, layers, t, p, n, batch, tflops, pct, agg in MEGATRON_TABLE1:
        runs.append(
            Run(
                f"MEG-{name}",
                "Megatron-LM Table 1",
                "MEG",
                _gpt(name, layers, h, heads),
                "selene",
                n,
                t,
                p,
                n // (t * p),  # Table 1 gives n, t and p; d = n / (t·p) (§2.3)
                batch,
                2048,
                sharding="none (DDP)",
                schedule="1F1B / interleaved 1F1B (§2.2)" if p > 1 else "-",
                precision="16-bit mixed (§5)",
                reported={"TFLOP/s per GPU": tflops, "% of peak": pct, "aggregate PFLOP/s": agg},
                counting="hardware FLOPs, eq. (3), recomputation included",
                assumed={"micro-batch": 1, "recompute": True},
            )
        )
    return runs


LLAMA3_405B = ModelShape.llama(126, 16384, 128, 8, 128000, 53248, seq_len=8192, name="Llama 3 405B")

LLAMA3 = [
    Run(
        f"L3-{name}",
        "Llama 3 405B",
        "L3",
        LLAMA3_405B,
        "meta-h100",
        gpus,
        8,
        16,
        dp,
        dp * per_dp,
        seq,
        cp=cp,
        sharding="FSDP (§3.3.2)",
        schedule="interleaved 1F1B, tuned (§3.3.2)",
        reported={"TFLOP/s per GPU": tflops, "BF16 MFU %": mfu, "tokens per batch": "16M"},
        counting="BF16 MFU against the H100's dense bf16 peak",
        assumed={"micro-batch": 1},
    )
    for name, gpus, cp, dp, seq, per_dp, tflops, mfu in (
        ("8K GPUs", 8192, 1, 64, 8192, 32, 430, 43),
        ("16K GPUs", 16384, 1, 128, 8192, 16, 400, 41),
        ("16K GPUs, 128K context", 16384, 16, 8, 131072, 16, 380, 38),
    )
]

DEEPSEEK_V3 = Run(
    "DSV3",
    "DeepSeek-V3",
    "DSV3",
    MoEShape(),
    "deepseek-h800",
    2048,
    1,
    16,
    128,  # 2,048 / 16 stages; the attention part is data parallel over them (ZeRO-1)
    15360,
    4096,
    ep=64,
    sharding="ZeRO-1",
    schedule="DualPipe (§3.2.1)",
    precision="FP8 mixed (§3.3)",
    reported={
        "H800 GPU hours per 1e12 tokens": 180e3,
        "total params B": 671,
        "active params B": 37,
    },
    counting="GPU hours per trillion tokens; MFU not published",
    assumed={"routed to nodes": 4},
)

BLOOM = Run(
    "BLOOM",
    "BLOOM-176B",
    "BLOOM",
    ModelShape.gpt(70, 14336, 112, vocab=250680, seq_len=2048, name="BLOOM-176B"),
    "jean-zay",
    384,
    4,
    12,
    8,
    2048,
    2048,
    sharding="ZeRO-1",
    schedule="1F1B (Megatron-DeepSpeed)",
    reported={"TFLOP/s per GPU": 156, "memory GB per GPU": 60},
    counting="TFLOP/s as Megatron-DeepSpeed logs them (recomputation included, assumed)",
    assumed={"micro-batch": 1, "recompute": True, "positions": "ALiBi: no parameters"},
)

OPT = Run(
    "OPT",
    "OPT-175B",
    "OPT",
    ModelShape.gpt(96, 12288, 96, vocab=50272, seq_len=2048, name="OPT-175B"),
    "azure-a100",
    992,
    None,
    1,
    None,
    None,
    2048,
    sharding="FSDP (full sharding)",
    schedule="-",
    precision="fp16 weights, fp32 Adam states (§2.4)",
    reported={"TFLOP/s per GPU": 147},
    counting="'up to' 147 TFLOP/s per GPU; how FLOPs are counted is not stated",
    assumed={"tp": 8, "dp": 124, "global batch": 992, "micro-batch": 8, "recompute": True},
)

ALPACA = Run(
    "ALPACA",
    "Alpaca 7B fine-tune",
    "ALPACA",
    ModelShape.llama(32, 4096, 32, 32, 32000, 11008, seq_len=512, name="LLaMA-7B"),
    "a100-node",
    4,
    1,
    1,
    4,
    128,
    512,
    sharding="FSDP full_shard",
    schedule="-",
    micro_batch=4,
    reported={},
    counting="no throughput published",
)

RUNS: list[Run] = [*_megatron(), *LLAMA3, DEEPSEEK_V3, BLOOM, OPT, ALPACA]


def by_key(key: str) -> Run:
    return next(r for r in RUNS if r.key == key)


def degree(run: Run, name: str):
    """A degree as published, or the chapter's assumption marked with a ``*``."""
    value = getattr(run, name)
    if value is None:
        return f"{run.assumed[name]}*" if name in run.assumed else "?"
    return value


def layout_row(run: Run) -> dict:
    """One row of the sortable table: the layout as published (``*``: assumed, not published)."""
    model = run.model
    params = model.params / 1e9
    figure = "; ".join(f"{k} {v}" for k, v in run.reported.items()) or "-"
    return {
        "training": run.training,
        "run": run.key,
        "params B": round(params, 1),
        "GPUs": run.gpus,
        "GPU": GPU_KIND[run.cluster],
        "TP": degree(run, "tp"),
        "CP": run.cp,
        "PP": degree(run, "pp"),
        "DP": degree(run, "dp"),
        "EP": run.ep,
        "sharding": run.sharding,
        "batch (seq)": run.global_batch or f"{run.assumed.get('global batch')}*",
        "seq": run.seq,
        "micro-batch": run.micro_batch or f"{run.assumed.get('micro-batch', '?')}*",
        "schedule": run.schedule,
        "precision": run.precision,
        "published": figure,
        "source": SOURCES[run.source],
    }
