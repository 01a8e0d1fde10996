"""The one-GPU records as the pages quote them (Chapters 7 and 9): every number recomputed."""

from pathlib import Path

import pytest

from helpers.record import ch07_tables, ch07_world
from helpers.chapters.ch09_resnet import resnet_world_rows
from helpers.record.results import find

BOOK = Path(__file__).resolve().parent.parent / "book"
ONE_7, TWO_7 = find("ch07_memory", gpus=1), find("ch07_memory", gpus=2)
ONE_9, TWO_9 = find("ch09_resnet", gpus=1), find("ch09_resnet", gpus=2)


@pytest.mark.skipif(ONE_7 is None or TWO_7 is None, reason="no one-GPU Chapter 7 record")
def test_chapter7_quotes_the_one_gpu_record():
    page = (BOOK / "07_memory.md").read_text()
    rows = {r["layout"]: r for r in ch07_world.world_rows(ONE_7, TWO_7)}
    measured = {k: r for k, r in rows.items() if r["1×H200 error %"] != "—"}
    assert set(measured) == {"DDP fp32", "DDP bf16 (Hybrid tp=1)", "ZeRO-2 bf16"}
    for r in measured.values():
        assert f"{r['1×H200 measured GiB']} GiB" in page
        assert abs(float(r["1×H200 error %"])) <= 0.6
    ddp = ch07_tables.summary(next(x for x in ONE_7["runs"] if x["name"] == "DDP fp32"))
    assert f"{-ddp['error_pct_at_recording']:.1f} % more than predicted" in page
    z1, z2 = (float(rows["ZeRO-2 bf16"][f"{b} measured GiB"]) for b in ("1×H200", "2×H200"))
    assert f"{z1 - z2:.2f} GiB more than on two GPUs" in page


@pytest.mark.skipif(ONE_9 is None or TWO_9 is None, reason="no one-GPU Chapter 9 record")
def test_chapter9_quotes_the_one_gpu_record():
    page = (BOOK / "09_quick_demos.md").read_text()
    [row] = [r for r in resnet_world_rows(ONE_9, TWO_9) if r["run"].startswith("1 GPU")]
    one, two = (float(row[f"{b} test accuracy"].rstrip(" %")) for b in ("1×H200", "2×H200"))
    assert f"{one:.2f} %" in page and f"{two:.2f} %" in page
    assert (
        f"({round(one / 100 * 359)} of the 359 images)" in page
        and f"{two:.2f} %, {round(two / 100 * 359)})" in page
    )


ONE_8 = find("flagship", gpus=1)


@pytest.mark.skipif(ONE_8 is None, reason="no one-GPU flagship record")
def test_chapter8_quotes_the_one_gpu_flagship_record():
    from helpers.chapters.ch08_one_gpu import world_rows

    page = " ".join((BOOK / "08_troubleshooting.md").read_text().split())
    rows = world_rows()
    ones, twos = rows[1::2], rows[0::2]
    speeds = [int(r["tokens/s/GPU"].replace(",", "")) for r in ones]
    assert ", ".join(f"{v:,}" for v in speeds[:2]) + f" and {speeds[2]:,} tokens/s" in page
    mfus = [r["MFU %"] for r in ones]
    assert f"({mfus[0]} %, {mfus[1]} % and {mfus[2]} % MFU)" in page
    ratios = [r["1 GPU / 2 GPUs (tokens/s per GPU)"] for r in ones]
    assert f"{ratios[0]}, {ratios[1]} and {ratios[2]} times" in page
    kept = sorted(round(100 / float(x)) for x in ratios)
    assert f"kept {kept[0]}–{kept[-1]} % of it" in page
    assert (
        f"from {twos[0]['peak GiB']} GiB on each of two GPUs to {ones[0]['peak GiB']} GiB" in page
    )
    gap = abs(speeds[2] - speeds[1]) / max(speeds[1:]) * 100
    assert gap <= 0.15 and "within 0.15 % of each other" in page


LEVERS_1 = find("flagship_levers", gpus=1)
# the phrases of helpers.chapters.ch08_levers_quotes that the page quotes, by record
LEVER_KEYS = (
    "ceiling",
    "ceiling share",
    "base",
    "base matmul",
    "base matmul rate",
    "base idle",
    "base peak",
    "base attention",
    "base cross-entropy",
    "base copy/cast",
    "base optimizer",
    "base triton",
    "base seconds",
    "SDPA backend: cuDNN",
    "SDPA backend: cuDNN attention",
    "fused linear CE: Liger-Kernel",
    "fused linear CE: Liger-Kernel cross-entropy",
    "fused linear CE: Liger-Kernel copy/cast",
    "fused linear CE: Liger-Kernel peak",
    "fused linear CE: Liger-Kernel idle",
    "fused linear CE: the book's chunked",
    "fused linear CE: the book's chunked peak",
    "fused linear CE: the book's chunked copy/cast",
    "fused linear CE: the book's chunked elementwise/other",
    "micro-batch 24",
    "micro-batch 24 peak",
    "cuDNN + Liger CE + micro-batch 24",
    "cuDNN + Liger CE + micro-batch 24 mfu",
    "cuDNN + Liger CE + micro-batch 24 peak",
    "cuDNN + Liger CE + micro-batch 24 idle",
    "compile: the whole decoder as one graph",
    "compile: the whole decoder as one graph triton",
    "compile: the whole decoder as one graph seconds",
    "compile: max-autotune-no-cudagraphs",
    "compile: max-autotune-no-cudagraphs seconds",
    "best",
    "best tokens",
    "best mfu",
    "best needed tokens",
    "best gap to 60",
    "best step",
    "best matmul share",
    "best matmul rate",
    "best rest",
    "best attention",
    "best triton (compiled)",
    "best optimizer",
    "best copy/cast",
    "best idle",
    "base matmul share",
    "base amdahl",
    # the rows added later: the micro-batch-48 re-run, fused projections, SDPA, optimizer, FSDP2
    "ceilings",
    "cuDNN + Liger CE + micro-batch 48",
    "cuDNN + Liger CE + micro-batch 48 mfu",
    "cuDNN + Liger CE + micro-batch 48 peak",
    "cuDNN + Liger CE + micro-batch 48 matmul",
    "cuDNN + Liger CE + micro-batch 48 triton",
    "fused projections: q/k/v and gate/up",
    "fused projections: q/k/v and gate/up matmul",
    "fused projections: q/k/v and gate/up triton",
    "cuDNN + Liger CE + fused projections + micro-batch 48 matmul",
    "cuDNN + Liger CE + fused projections + micro-batch 48 triton",
    "cuDNN + Liger CE + fused projections + micro-batch 48 over cuDNN + Liger CE + micro-batch 48",
    "FSDP2: cuDNN + Liger CE + micro-batch 48 over cuDNN + Liger CE + micro-batch 48",
    "FSDP2: cuDNN + Liger CE + fused projections + micro-batch 48 over "
    "FSDP2: cuDNN + Liger CE + micro-batch 48",
    "FSDP2: cuDNN + Liger CE + micro-batch 48 mfu",
    "SDPA backend: flash",
    "SDPA backend: flash attention",
    "SDPA backend: memory-efficient",
    "SDPA backend: memory-efficient attention",
    "optimizer: foreach AdamW",
    "optimizer: foreach AdamW optimizer",
    "optimizer: foreach AdamW attention",
    "CUDA graphs: whole decoder, reduce-overhead",
    "CUDA graphs: whole decoder, reduce-overhead idle",
    "CUDA graphs: whole decoder, reduce-overhead triton",
    "CUDA graphs: whole decoder, reduce-overhead seconds",
    "compile: the whole decoder as one graph idle",
    "optimizer: Colossal-AI HybridAdam",
    "optimizer: Colossal-AI HybridAdam mfu",
    "optimizer: Colossal-AI HybridAdam optimizer",
    "micro-batch 32, 4 of 16 layers recomputed",
    "micro-batch 32, 4 of 16 layers recomputed mfu",
    "micro-batch 32, 4 of 16 layers recomputed peak",
    "micro-batch 32, 4 of 16 layers recomputed peak without",
    "micro-batch 32, 4 of 16 layers recomputed recompute work",
    "micro-batch 32, 4 of 16 layers recomputed matmul per token",
    "micro-batch 32, 4 of 16 layers recomputed matmul rate",
)


def _page8() -> str:
    return " ".join((BOOK / "08_troubleshooting.md").read_text().split())


@pytest.mark.skipif(LEVERS_1 is None, reason="no one-GPU lever record")
def test_chapter8_quotes_the_lever_record():
    from helpers.chapters.ch08_levers_quotes import lever_quotes

    page, quotes = _page8(), lever_quotes(LEVERS_1)
    missing = [f"{k}: {quotes[k]}" for k in LEVER_KEYS if quotes[k] not in page]
    assert not missing, missing


@pytest.mark.skipif(LEVERS_1 is None, reason="no one-GPU lever record")
def test_the_head_to_head_runs_the_lever_records_best_row():
    """flagship_levers.BEST, the levers both head-to-head runs get, are those of the fastest row
    of the lever record that kept its loss (its trace flags aside)."""
    from helpers.chapters.ch08_levers_quotes import lever_quotes
    from helpers.record.flagship_levers import BASE, BEST, H2H, LEVERS

    best = lever_quotes(LEVERS_1)["best"]
    added = [a for a in dict(LEVERS)[best] if a not in ("--trace", "--memory_snapshot")]
    assert added == BEST and H2H[0][1] == BASE + BEST and H2H[1][1][-len(BEST) :] == BEST


H2H_1 = find("flagship_levers_h2h", gpus=1)


@pytest.mark.skipif(H2H_1 is None, reason="no one-GPU head-to-head record")
def test_chapter8_quotes_the_one_gpu_head_to_head():
    from helpers.chapters.ch08_levers_quotes import h2h_quotes

    page, quotes = _page8(), h2h_quotes(H2H_1)
    keys = ["colossal median", "colossal mfu", "colossal all-params mfu", "fsdp2 median"]
    keys += ["fsdp2 mfu", "colossal spread", "fsdp2 spread", "ratio", "rounds", "ceiling fraction"]
    keys += ["ceiling"]
    missing = [f"{k}: {quotes[k]}" for k in keys if quotes[k] not in page]
    assert not missing, missing


FP8_1 = find("flagship_fp8", gpus=1)


@pytest.mark.skipif(LEVERS_1 is None or FP8_1 is None, reason="no one-GPU lever or FP8 record")
def test_chapter8_quotes_the_trace_snapshot_and_fp8_records():
    from helpers.chapters.ch08_levers import by_name
    from helpers.chapters.ch08_levers_quotes import fp8_quotes, model_quotes, trace_quotes

    page = _page8()
    quotes = trace_quotes(by_name(LEVERS_1)["cuDNN + Liger CE + micro-batch 48"])
    quotes.update(fp8_quotes(FP8_1))
    run = next(r for r in LEVERS_1["runs"] if r["name"] == "cuDNN + Liger CE + micro-batch 48")
    quotes.update(model_quotes(run["args"]))
    keys = ["busy", "span", "snapshot peak", "static weights", "static optimizer", "fp8", "bf16"]
    keys += ["fp8 ratio", "fp8 matmul", "bf16 matmul", "matmul speedup", "fp8 copy/cast"]
    keys += ["bf16 copy/cast", "fp8 elementwise", "bf16 elementwise", "loss gap", "steps"]
    keys += ["model forward", "model backward", "model step", "colossal error"]
    missing = [f"{k}: {quotes[k]}" for k in keys if quotes[k] not in page]
    assert not missing, missing
