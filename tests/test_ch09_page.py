"""Chapter 9's page: every number it quotes, recomputed from the book's own code."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from helpers.cost.mfu import H200_BF16_PEAK as PEAK_FLOPS
from helpers.train.presets import PRESETS, flops_per_token
from helpers.parallel.ep import expert_capacity
from helpers.models.resnet import count_parameters, resnet18
from helpers.models.llama import llama_config, llama_params

PAGE = (Path(__file__).resolve().parent.parent / "book" / "09_quick_demos.md").read_text()


def test_page_is_complete():
    assert "This chapter is an outline" not in PAGE
    assert "still to be recorded" not in PAGE
    for key in (
        "ch09-resnet-cpu",
        "ch09-fig-moe-load",
        "ch09-resnet-gpu",
        "ch09-hybrid-gpu",
        "ch09-fig-hybrid",
        "ch09-nan-gpu",
        "ch09-fig-nan",
        "ch09-moe-gpu",
        "ch09-sp-gpu",
        "ch09-fig-sp",
        "ch09-sp-oom",
    ):
        assert f"```{{glue}} {key}" in PAGE


def test_resnet_and_mfu_numbers():
    assert count_parameters(resnet18(10)) == 11_181_642 and "11,181,642" in PAGE
    config = llama_config(**PRESETS["half"], max_seq=1024)
    n = llama_params(config) - config.vocab_size * config.hidden_size
    assert round(n / 1e9, 3) == 0.470 and round(flops_per_token(config, 1024) / 1e9, 2) == 3.02
    assert round(2 * PEAK_FLOPS / flops_per_token(config, 1024), -2) == 654_600
    assert round(llama_params(config) / 1e9, 2) == 0.54


def test_exercise_answers():
    assert (8 * 100, 8 * 1e-3, 50_000 // 800) == (800, 0.008, 62)  # exercise 1
    assert expert_capacity(4096, 8, 2, 1.25) == 1280 and 1600 - 1280 == 320  # exercise 2
    config = llama_config(**PRESETS["half"], max_seq=1024)
    f = flops_per_token(config, 1024)
    assert round(100 * f * 126_281 / (2 * PEAK_FLOPS), 1) == 19.3  # exercise 3, glued
    embedding = config.vocab_size * config.hidden_size
    assert round(embedding / 1e6, 1) == 65.5
    assert round(100 * (f + 6 * embedding) * 126_281 / (2 * PEAK_FLOPS), 1) == 21.8
    assert "ch09-mfu-tp-with-embedding:.1f" in PAGE and "ch09-tp-tokens:,d" in PAGE
    assert 8 * 32768**2 * 4 == 2**35 and 4 * 32768**2 * 4 / 2**30 == 16  # exercise 7
    assert [s for s in (1, 2, 3, 4, 8) if 16 % (2 * s) == 0 and 8 % (2 * s) == 0] == [
        1,
        2,
        4,
    ]  # exercise 4
    expert = 3 * 1024 * 2048  # exercise 5
    assert (
        round(expert / 1e6, 2) == 6.29
        and round(64 * expert / 1e6) == 403
        and round(32 * expert / 1e6) == 201
    )
    assert math.ceil(359 / 2) * 2 == 360  # exercise 6


@pytest.mark.parametrize("quote", ["85.85 %", "84.91 %", "85.46 %", "84.50 %", "84.60 %"])
def test_seed_table_quoted(quote):
    assert quote in PAGE


def test_cpu_accuracies_quoted_are_the_notebooks():
    import json

    nb = json.loads(
        (Path(__file__).resolve().parent.parent / "notebooks" / "09_quick_demos.ipynb").read_text()
    )
    tables = [
        o["data"]["text/html"]
        for c in nb["cells"]
        if c["cell_type"] == "code" and "ch09-resnet-cpu" in "".join(c["source"])
        for o in c["outputs"]
        if "data" in o and "text/html" in o["data"]
    ]
    html = "".join(tables[0]) if isinstance(tables[0], list) else tables[0]
    # the accuracies depend on the CPU's kernel path: the table marks them, the page quotes none
    import re

    accuracies = re.findall(r"≈(\d+\.\d\d) %", html)
    assert len(accuracies) == 2 and all(float(a) >= 90 for a in accuracies)
    cpu_section = PAGE.split("### One process, then two")[1].split("\n## ")[0].split("\n### ")[0]
    summary = PAGE.split("## Summary")[1].split("\n- ")[1]  # its first point is the CPU run's
    assert not any(f"{a} %" in text for a in accuracies for text in (cpu_section, summary))
    assert "--target_acc 0.9" in cpu_section and "≈" in summary


def test_the_one_gpu_baseline_is_glued_from_the_record():
    import json

    from helpers.chapters.ch09_resnet import resnet_world_rows
    from helpers.record.results import find

    one, two = find("ch09_resnet", gpus=1), find("ch09_resnet", gpus=2)
    if one is None or two is None:
        return
    [row] = [r for r in resnet_world_rows(one, two) if r["run"].startswith("1 GPU")]
    nb = Path(__file__).resolve().parent.parent / "notebooks" / "09_quick_demos.ipynb"
    glued = {
        o["metadata"]["scrapbook"]["name"]: float(
            "".join(o["data"][o["metadata"]["scrapbook"].get("mime_prefix", "") + "text/plain"])
        )
        for c in json.loads(nb.read_text())["cells"]
        for o in c.get("outputs", [])
        if o.get("metadata", {}).get("scrapbook", {}).get("name", "").startswith("ch09-acc-")
    }
    assert f"{glued['ch09-acc-one-box']:.2f} %" == row["1×H200 test accuracy"]
    assert f"{glued['ch09-acc-1gpu']:.2f} %" == row["2×H200 test accuracy"]
    assert "ch09-acc-one-box:.2f" in PAGE and "ch09-right-one-box:d" in PAGE
