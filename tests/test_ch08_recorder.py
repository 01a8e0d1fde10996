"""Chapter 8's GPU recorder, checked on CPU: every run it would launch parses and forms a valid
layout; the demo's CPU path (FSDP2 and TorchDDPPlugin on gloo) trains like the single-process
reference and reports a profiler split; the profiler arithmetic merges overlapping intervals."""

import pytest

from helpers.record import ch08, runner as recorder
from helpers.train.framework_run import layout_from, parser
from helpers.train.profiling import merged_length, split


@pytest.mark.parametrize("quick", [False, True])
@pytest.mark.parametrize("part", ch08.PARTS)
def test_run_lists_parse(part, quick):
    runs = ch08.run_list(part, quick)
    assert runs
    for name, args, timeout_s in runs:
        layout = layout_from(parser().parse_args(args))
        assert layout.world % (layout.tp * layout.pp) == 0 and timeout_s >= 60


def test_compare_is_like_for_like():
    layouts = [layout_from(parser().parse_args(a)) for _, a, _ in ch08.run_list("compare")]
    assert len({(lay.global_batch, lay.seq, lay.precision, lay.shape) for lay in layouts}) == 1


def test_tune_changes_one_knob_at_a_time():
    runs = ch08.run_list("tune")
    keys = ("tp", "pp", "micro_batch", "microbatches", "recompute", "overlap")
    prev = None
    for _, args, _ in runs:
        ns = parser().parse_args(args)
        now = {k: getattr(ns, k) for k in keys}
        if prev is not None and now["pp"] == prev["pp"]:
            changed = [k for k in keys if now[k] != prev[k]]
            assert 1 <= len(changed) <= 2, (
                changed
            )  # tp→1 or micro-batches keep the global batch: 2 flags
        prev = now


def test_oom_cap_between_predictions():
    cap, peaks = ch08.oom_cap_gib()
    before = [v for k, v in peaks.items() if k.startswith("before")]
    fixes = [v for k, v in peaks.items() if k.startswith("fix")]
    assert max(fixes) < cap < min(before)


def test_merged_length_and_split():
    assert merged_length([(0, 10), (5, 15), (20, 25)]) == 20
    parts = split([("ncclAllReduce", 0, 10), ("gemm", 5, 30), ("ncclAllGather", 28, 40)])
    assert parts["comm_us"] == 22 and parts["compute_us"] == 25 and parts["exposed_comm_us"] == 15


def test_record_survives_failures(monkeypatch):
    calls = []

    def fake(name, demo, gpus, args, timeout_s, show):
        calls.append(name)
        return {
            "name": name,
            "ok": False,
            "error": "boom\nlast line",
            "results": [],
            "seconds": 0.1,
        }

    monkeypatch.setattr(recorder, "run_one", fake)
    out = ch08.record(["oom"], quick=False, budget_s=1e9, save_results=False)
    assert len(calls) == len(ch08.OOM_RUNS) and out["oom"][0]["info"]["cap_gib"] > 0


@pytest.mark.parametrize("framework", ["fsdp2", "colossal"])
def test_cpu_path_matches_reference(framework):
    """Chapter 6's CPU run of each framework (the one its notebook shows): two gloo ranks match
    the one-process reference, and the profiled step found the all-reduce."""
    from helpers.chapters.ch06_frameworks import cpu_run

    r0, r1 = cpu_run(framework)
    mean = [(a + b) / 2 for a, b in zip(r0["losses"], r1["losses"])]
    assert max(abs(a - b) for a, b in zip(mean, r0["reference"])) < 2e-3
    assert r0["profile"]["device"] == "cpu" and r0["profile"]["comm_ms"] > 0 and not r0["oom"]


@pytest.mark.gpu
@pytest.mark.skipif(
    __import__("helpers.run.env", fromlist=["gpu_count"]).gpu_count() < 2,
    reason="needs at least two CUDA GPUs",
)
def test_quick_recording_runs_on_gpus():
    recorded = ch08.record(list(ch08.PARTS), quick=True, budget_s=600, save_results=False)
    runs = [r for part in recorded.values() for r in part if "name" in r]
    assert runs and all(r["ok"] for r in runs), [
        r.get("error", "")[-300:] for r in runs if not r["ok"]
    ]
    oom = [r for r in recorded["oom"] if "name" in r]
    assert (
        oom[0]["results"][0]["oom"] and not oom[1]["results"][0]["oom"]
    )  # capped DDP fails, ZeRO-2 fits


def test_gemini_part_differs_only_in_async_reduce():
    from inspect import signature

    from colossalai.booster.plugin import GeminiPlugin

    from helpers.train.speed import plugin_kwargs

    (_, on, _), (_, off, _) = ch08.run_list("gemini")
    a, b = parser().parse_args(on), parser().parse_args(off)
    assert plugin_kwargs(a.plugin_kw) == {} and plugin_kwargs(b.plugin_kw) == {
        "enable_async_reduce": False
    }
    assert {k: v for k, v in vars(a).items() if k not in ("plugin_kw", "name")} == {
        k: v for k, v in vars(b).items() if k not in ("plugin_kw", "name")
    }
    assert (
        signature(GeminiPlugin).parameters["enable_async_reduce"].default is True
    )  # the default under test


def test_kernel_classes_sort_cuda_kernel_names():
    from helpers.train.profiling import kernel_class, kernel_classes

    names = {
        "sm90_xmma_gemm_bf16bf16_bf16f32": "matmul",
        "nvjet_tst_128x256_64x4": "matmul",
        "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>": "attention",
        "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0": "triton (compiled)",
        "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL": "communication",
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward": "cross-entropy",
        "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor>": "optimizer",
        "void at::native::elementwise_kernel<128, 2, direct_copy_kernel_cuda>": "copy/cast",
        "void at::native::vectorized_elementwise_kernel<4, silu_kernel>": "elementwise/other",
    }
    assert {n: kernel_class(n) for n in names} == names
    out = kernel_classes(
        [("gemm_a", 0, 3000), ("gemm_a", 5000, 6000), ("silu", 3000, 4000)], steps=2
    )
    assert out["ms"] == {"matmul": 2.0, "elementwise/other": 0.5} and out["top"][0] == [
        "gemm_a",
        2.0,
    ]
