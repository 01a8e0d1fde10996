"""Hardware presets of the published trainings (Chapter 12): A100, H100 and H800 clusters.

Used by Chapter 12 (in practice) to give :class:`helpers.cost.step_time.Hardware` the GPUs, links
and network cards each source names. Peaks are dense (no sparsity) tensor-core figures from
NVIDIA's datasheets; ``inter`` is ONE network card per direction, and ``cards_per_node`` says how
many a node has (:func:`helpers.cost.placement.spanning_link` spreads a ring's node crossings over
them). Latencies are the assumed orders of magnitude of :data:`helpers.cost.comm.NOMINAL_LINKS`,
not datasheet figures.

* **A100 SXM 80 GB** (NVIDIA A100 datasheet): 312 TFLOP/s dense bf16/fp16; NVLink 3 600 GB/s
  total per GPU (12 links × 50 GB/s bidirectional), 300 GB/s per direction through NVSwitch.
* **Selene** (Narayanan et al. 2021, §5): "Each node has eight NVIDIA Mellanox 200Gbps HDR
  Infiniband HCAs for application communication": eight cards of 25 GB/s per direction. OPT-175B's
  Azure cluster (Zhang et al. 2022, §2.4) is taken to be alike: an assumption, neither the paper
  nor metaseq names its network.
* **Jean Zay** (BigScience, ``train/tr11-176B-ml/README.md``): "8 GPUs per node Using NVLink 4
  inter-gpu connects, 4 OmniPath links": four NVLink links (25 GB/s per direction each, 100 GB/s)
  and four 100 Gb/s Omni-Path cards per node (12.5 GB/s each).
* **H100 SXM 80 GB** (NVIDIA H100 datasheet): 989.5 TFLOP/s dense bf16; NVLink 4 450 GB/s per
  direction. Meta's Llama 3 cluster (Dubey et al. 2024, §3.3.1): "Each server is equipped with
  eight GPUs", "400 Gbps interconnects between GPUs": one 50 GB/s card per GPU.
* **H800** (DeepSeek-AI 2024, DeepSeek-V3 report §3.1 and §3.2.2): the H100's compute with
  NVLink cut down; "NVLink offers a bandwidth of 160 GB/s, roughly 3.2 times that of IB (50
  GB/s)", one InfiniBand card per GPU.
"""

from __future__ import annotations

from dataclasses import replace

from helpers.cost.comm import NOMINAL_LINKS, Link
from helpers.cost.step_time import Hardware

A100_BF16_PEAK = 312e12  # FLOP/s, dense bf16, NVIDIA A100 datasheet
H100_BF16_PEAK = 989.5e12  # FLOP/s, dense bf16, NVIDIA H100 SXM datasheet (H800: the same)

NVLINK3 = Link("NVLink 3, A100 SXM (300 GB/s per direction, 5 µs assumed)", 300e9, 5e-6)
NVLINK3_4 = Link("NVLink 3, 4 links (100 GB/s per direction, 5 µs assumed)", 100e9, 5e-6)
IB_HDR = Link("InfiniBand HDR 200 Gb/s per GPU (25 GB/s per direction, 10 µs assumed)", 25e9, 1e-5)
OMNIPATH = Link("Omni-Path 100 Gb/s card (12.5 GB/s per direction, 10 µs assumed)", 12.5e9, 1e-5)
ROCE_400 = Link("RoCE 400 Gb/s per GPU (50 GB/s per direction, 10 µs assumed)", 50e9, 1e-5)
NVLINK_H800 = Link("NVLink, H800 (160 GB/s achievable, 5 µs assumed)", 160e9, 5e-6)

PRESETS: dict[str, Hardware] = {
    "selene": Hardware(8, 80.0, A100_BF16_PEAK, 0.40, NVLINK3, IB_HDR),
    "azure-a100": Hardware(8, 80.0, A100_BF16_PEAK, 0.40, NVLINK3, IB_HDR),
    "jean-zay": Hardware(8, 80.0, A100_BF16_PEAK, 0.40, NVLINK3_4, OMNIPATH, cards_per_node=4),
    "meta-h100": Hardware(8, 80.0, H100_BF16_PEAK, 0.40, NOMINAL_LINKS["nvlink4"], ROCE_400),
    "deepseek-h800": Hardware(8, 80.0, H100_BF16_PEAK, 0.40, NVLINK_H800, NOMINAL_LINKS["ib_ndr"]),
    "a100-node": Hardware(8, 80.0, A100_BF16_PEAK, 0.40, NVLINK3, IB_HDR),
}

GPU_KIND = {
    "selene": "A100 80 GB",
    "azure-a100": "A100 80 GB",
    "jean-zay": "A100 80 GB",
    "meta-h100": "H100 80 GB",
    "deepseek-h800": "H800 80 GB",
    "a100-node": "A100 80 GB",
}


def preset(name: str, efficiency: float | None = None) -> Hardware:
    """The preset ``name``, with the compute efficiency (``Hardware.mfu``: the share of the peak
    reached while computing) replaced when ``efficiency`` is given."""
    hw = PRESETS[name]
    return hw if efficiency is None else replace(hw, mfu=efficiency)


def describe(name: str) -> dict:
    """One row for a table of the presets: GPU, peak, links."""
    hw = PRESETS[name]
    return {
        "cluster": name,
        "GPU": GPU_KIND[name],
        "peak bf16 TFLOP/s": round(hw.peak_flops / 1e12, 1),
        "GPUs per node": hw.gpus_per_node,
        "intra-node GB/s": round(hw.intra.bandwidth_bytes_per_s / 1e9, 2),
        "network cards per node": hw.cards_per_node or hw.gpus_per_node,
        "GB/s per card": round(hw.inter.bandwidth_bytes_per_s / 1e9, 2),
    }
