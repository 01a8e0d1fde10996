"""helpers.train.trace: span arithmetic, CPU and CUDA classification, a real profile and its Chrome
export, and Chapter 2's traced step on 4 gloo ranks (shared with the notebook's launch)."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from helpers.chapters import ch02_trace  # noqa: E402
from helpers.figures.ch02_trace import trace_figure  # noqa: E402
from helpers.train import trace  # noqa: E402


def test_span_arithmetic():
    assert trace.union([(3, 4), (0, 2), (1, 2.5), (4, 5)]) == [(0, 2.5), (3, 5)]
    assert trace.intersect([(0, 10)], [(2, 3), (5, 12)]) == [(2, 3), (5, 10)]
    assert trace.subtract([(0, 10)], [(2, 3), (5, 12)]) == [(0, 2), (3, 5)]
    assert trace.subtract([(0, 1)], []) == [(0, 1)]
    assert trace.clip([(-5, 1), (2, 20)], (0, 10)) == [(0, 1), (2, 10)]


def _cpu_events():
    # main thread 1: the step 0..100, compute 0..20 and 50..70, a sync all-reduce call 20..30
    # with a nested copy; gloo's thread 2 runs an all-reduce 22..40 and an async one 45..60
    return [
        ("step", 0.0, 100.0, 1, False),
        ("aten::mm", 0.0, 20.0, 1, False),
        ("c10d::allreduce_", 20.0, 30.0, 1, False),
        ("aten::copy_", 21.0, 22.0, 1, False),
        ("gloo:all_reduce", 22.0, 40.0, 2, False),
        ("c10d::allreduce_", 44.0, 45.0, 1, False),
        ("gloo:all_reduce", 45.0, 60.0, 2, False),
        ("aten::mm", 50.0, 70.0, 1, False),
        ("ReduceFromTensorParallel", 19.0, 41.0, 1, False),  # a wrapper: not compute
        ("aten::mm", 200.0, 300.0, 1, False),  # outside the step
    ]


def test_cpu_classification_and_numbers():
    t = trace.from_events(_cpu_events(), "cpu", "step")
    assert t.window == (0.0, 100.0)
    assert t.compute == [(0.0, 20.0), (50.0, 70.0)]  # the copy inside the collective is not
    assert t.collectives == 2 and t.names == {"c10d::allreduce_": 2}
    n = t.numbers()
    assert n["communication_ms"] == pytest.approx(0.036)  # 20..40 and 44..60
    assert n["overlapped_ms"] == pytest.approx(0.010)  # 50..60
    assert n["exposed_ms"] == pytest.approx(0.026)
    assert n["idle_ms"] == pytest.approx(0.100 - 0.066)  # busy: 0..40 and 44..70
    assert n["hidden_share"] == pytest.approx(10 / 36)
    kinds = t.intervals()
    assert kinds[0] == (0.0, 20e-6, "compute") and kinds[-1] == (70e-6, 100e-6, "idle")
    assert sum(e - s for s, e, _ in kinds) == pytest.approx(100e-6)  # disjoint, whole window
    assert trace.StepTrace.from_json(json.loads(json.dumps(t.to_json()))) == t
    with pytest.raises(ValueError, match="record_function"):
        trace.from_events(_cpu_events(), "cpu", "other")


def test_cuda_classification_uses_kernels_and_nccl_names():
    events = [
        ("step", 0.0, 5.0, 1, False),  # the CPU side, launched ahead
        ("sm90_xmma_gemm_bf16", 10.0, 30.0, 7, True),
        ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 25.0, 45.0, 8, True),
        ("triton_poi_fused_add_0", 50.0, 60.0, 7, True),
    ]
    t = trace.from_events(events, "cuda")
    assert t.window == (10.0, 60.0) and t.collectives == 1
    n = t.numbers()
    assert n["overlapped_ms"] == pytest.approx(0.005) and n["exposed_ms"] == pytest.approx(0.015)
    assert n["idle_ms"] == pytest.approx(0.005)
    # with the marker's range on the GPU, that range is the window and not a kernel
    marked = trace.from_events(events + [("step", 5.0, 65.0, 7, True)], "cuda")
    assert marked.window == (5.0, 65.0) and marked.numbers()["idle_ms"] == pytest.approx(0.015)
    with pytest.raises(ValueError, match="CUDA kernel"):
        trace.from_events(events[:1], "cuda")


def test_a_real_profile_and_its_chrome_export_agree(tmp_path):
    a, b = torch.randn(64, 128), torch.randn(128, 128)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with record_function("step"):
            for _ in range(3):
                (a @ b).relu().sum()
    live = trace.from_profile(prof)
    assert live.collectives == 0 and live.communication == []
    n = live.numbers()
    assert 0 < n["compute_ms"] <= n["step_ms"] and n["hidden_share"] == 0.0
    prof.export_chrome_trace(str(tmp_path / "t.json"))
    saved = trace.from_events(trace.chrome_events(json.loads((tmp_path / "t.json").read_text())))
    assert saved.numbers()["step_ms"] == pytest.approx(n["step_ms"], abs=0.01)
    assert saved.numbers()["compute_ms"] == pytest.approx(n["compute_ms"], abs=0.01)


def test_expected_collectives():
    assert ch02_trace.expected_collectives(4, tp=2, dp=2) == 7 + 16
    assert ch02_trace.expected_collectives(4, tp=1, dp=2) == 16
    # measured with --tp 2 --pp 2 on 4 ranks: stage 0 has 3 all-reduces, a send and a recv;
    # stage 1 has 4 all-reduces (its input needs a gradient), a recv and a send
    assert ch02_trace.expected_collectives(4, tp=2, dp=1, pp=2, stage=0) == 5
    assert ch02_trace.expected_collectives(4, tp=2, dp=1, pp=2, stage=1) == 6
    assert ch02_trace.expected_collectives(6, tp=1, dp=1, pp=3, stage=1) == 4


def test_chapter2_step_trace_on_4_ranks():
    results = ch02_trace.run().results
    facts = ch02_trace.check(results)  # gradients, collective counts, the two orders
    assert facts["collectives per rank and step"] == "23"
    assert ch02_trace.totals(results, "overlap")["overlapped_ms"] > 0
    fig = trace_figure(results)
    assert len(fig.axes) == 2 and len(fig.axes[0].get_yticks()) == 8
    assert {r["order"] for r in ch02_trace.rows(results)} == set(ch02_trace.ORDERS)


def test_cuda_profile_leaves_out_the_ranges_record_function_puts_on_the_gpu():
    from types import SimpleNamespace as NS

    from torch.autograd import DeviceType

    def ev(name, a, b, dev=DeviceType.CUDA, note=False):
        return NS(
            name=name,
            time_range=NS(start=a, end=b),
            device_type=dev,
            thread=0,
            is_user_annotation=note,
        )

    events = [
        ev("step", 0.0, 5.0, DeviceType.CPU, note=True),  # the CPU side
        ev("step", 8.0, 70.0, note=True),  # the same range on the GPU: the window
        ev("FSDP::all_gather", 9.0, 69.0, note=True),  # an annotation, not a kernel
        ev("sm90_xmma_gemm_bf16", 10.0, 30.0),
        ev("ncclDevKernel_AllGather_RING_LL", 25.0, 45.0),
    ]
    kineto = NS(trace_start_ns=lambda: 1_000_000)  # 1000 µs
    prof = NS(events=lambda: events, profiler=NS(kineto_results=kineto))
    t = trace.from_profile(prof, "cuda")
    assert t.window == (1008.0, 1070.0) and t.collectives == 1
    n = t.numbers()
    assert n["compute_ms"] == pytest.approx(0.020) and n["communication_ms"] == pytest.approx(0.020)
    assert n["idle_ms"] == pytest.approx(0.062 - 0.035)
