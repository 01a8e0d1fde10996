"""Chapter 7's page: the worked answers it types are the functions' values, every glued key it
shows exists in the notebook, and the figures and numbers helpers give what the page states."""

import json
import re
from pathlib import Path

from helpers.chapters.ch07_numbers import model_numbers, page_world_rows
from helpers.cost.memory_llama import layer_activation_bytes
from helpers.figures.zero_stages import FSDP, MEGATRON, kept_per_rank
from helpers.parallel.train_layout import CH07_SHAPE

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "book" / "07_memory.md").read_text()
APPENDIX = (ROOT / "book" / "measured" / "ch07.md").read_text()
NOTEBOOK = ROOT / "notebooks" / "07_memory.ipynb"
MIB, GIB = 2**20, 2**30
N = 4 * 1024  # tokens of one micro-batch


def _glued_names() -> set[str]:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    return {
        o["metadata"]["scrapbook"]["name"]
        for c in cells
        for o in c.get("outputs", [])
        if o.get("metadata", {}).get("scrapbook")
    }


def test_every_key_the_pages_show_is_glued_by_the_notebook():
    used = set(re.findall(r"07_memory\.ipynb::([\w-]+):", PAGE))
    used |= set(re.findall(r"```\{glue(?::figure)?\} ([\w-]+)", PAGE + APPENDIX))
    assert used and used <= _glued_names(), sorted(used - _glued_names())


def test_worked_answers_are_the_functions():
    layer = layer_activation_bytes(CH07_SHAPE, N, 1024, 2)
    loss = 12 * N * CH07_SHAPE.vocab
    assert round(layer / MIB, -1) == 190 and "about 190 MiB per layer" in PAGE
    assert round(loss / MIB) == 1500 and "$= 1500$ MiB" in PAGE
    assert f"{12 * N * 96_000 / GIB:.1f}" == "4.4" and "\\approx 4.4$ GiB" in PAGE
    rest = layer / N / CH07_SHAPE.hidden - (2 + 4 * 16 / CH07_SHAPE.hidden)  # without sdpa core
    assert f"{rest:.1f}" == "45.5" and "$45.5h$" in PAGE
    assert 6 * 4 * 16 * 4096**2 == 6 * GIB


def test_the_eager_ratio_is_about_two_not_three():
    n = model_numbers()
    assert 2.05 < n["ch07-eager-ratio"] < 2.15 and "three times" not in PAGE
    assert n["ch07-gemini-chunks"] == 8 and round(n["ch07-gemini-pad-pct"], 1) == 9.7


def test_the_zero_speed_gap_is_not_explained_by_buckets_and_the_norm():
    section = PAGE.split("## The techniques side by side")[1].split("\n## ")[0]
    assert "Why is not\n  measured" in section or "Why is not measured" in " ".join(section.split())
    assert "cost more than\n  PyTorch DDP's all-reduce" not in section


def test_what_each_rank_keeps():
    kept = {
        k: sum(v[s][0] for s in ("parameters", "gradients", "optimizer states"))
        for k, v in kept_per_rank(8).items()
    }
    assert kept["ZeRO-1"] == 4 + 12 / 8 and kept["ZeRO-3"] == 2
    assert kept[FSDP] == 2 and kept[MEGATRON] == 6 + 12 / 8
    assert not kept_per_rank(8)[MEGATRON]["gradients"][2]  # the fp32 gradient buffer is whole


def test_the_page_keeps_bookkeeping_in_the_appendix():
    for word in ("numpy", "json", "GPU time", "at recording", "budget"):
        assert word not in PAGE, word
    assert "numpy integers" in APPENDIX and "error % at recording" not in PAGE


def test_world_rows_hide_the_recorders_reasons():
    rows = [
        {"layout": "a", "2×H200 measured GiB": "1.00", "1×H200 measured GiB": "not run: x budget"},
        {"layout": "b", "1×H200 measured GiB": "not run: needs 2 GPUs (tp·pp = 2)", "note": "n"},
    ]
    page, why = page_world_rows(rows)
    assert page[0]["1×H200 measured GiB"] == "not measured" and "note" not in page[1]
    assert page[1]["1×H200 measured GiB"] == "needs 2 GPUs" and len(why) == 2


def test_the_one_gpu_numbers_are_glued_from_the_record():
    from helpers.record import ch07_world
    from helpers.record.results import find

    one, two = find("ch07_memory", gpus=1), find("ch07_memory", gpus=2)
    if one is None or two is None:
        return
    rows = {r["layout"]: r for r in ch07_world.world_rows(one, two)}
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    glued = {
        o["metadata"]["scrapbook"]["name"]: float(
            "".join(o["data"][o["metadata"]["scrapbook"].get("mime_prefix", "") + "text/plain"])
        )
        for c in cells
        for o in c.get("outputs", [])
        if o.get("metadata", {}).get("scrapbook", {}).get("name", "").startswith("ch07-one-")
    }
    for key, layout in (("ddp", "DDP fp32"), ("bf16", "DDP bf16 (Hybrid tp=1)")):
        assert f"{glued[f'ch07-one-{key}-gib']:.2f}" == rows[layout]["1×H200 measured GiB"]
        assert f"ch07-one-{key}-gib:.2f" in PAGE
    z1, z2 = (float(rows["ZeRO-2 bf16"][f"{b} measured GiB"]) for b in ("1×H200", "2×H200"))
    assert abs(glued["ch07-one-zero2-more-gib"] - (z1 - z2)) < 0.01
