"""Activation offload (Chapter 7, "Offloading activations"): the gradients unchanged on the CPU,
the memory model's offload term checked by hand, the recorder's refusal without a GPU and its
record written from a fake measurement."""

import json
import types

import pytest
import torch
import torch.distributed as dist

from helpers.cost.memory_llama import predict
from helpers.cost.memory_plan import PlanLayout, offload_seconds
from helpers.models.llama import build_llama
from helpers.models.shape import ModelShape
from helpers.record import cli, offload as recorder, results
from helpers.train.offload import ActivationOffload, per_layer
from helpers.train.offload_run import measure

GIB = 2**30
TINY = ModelShape.llama(layers=4, hidden=64, heads=4, kv_heads=4, vocab=256)


def _grads(dtype, make_hooks=None):
    model = build_llama(TINY.config(attn="sdpa"), dtype=dtype)
    ids = torch.randint(0, TINY.vocab, (2, 32), generator=torch.Generator().manual_seed(0))
    hooks = make_hooks(model.model.layers) if make_hooks else None
    with hooks if isinstance(hooks, ActivationOffload) else torch.enable_grad():
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach(), [p.grad for p in model.parameters()], hooks


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("in_flight", [1, 2])
def test_offloaded_gradients_equal_the_plain_ones_exactly(dtype, in_flight):
    loss, grads, _ = _grads(dtype)
    off_loss, off_grads, off = _grads(dtype, lambda ls: ActivationOffload(ls, 0, in_flight))
    assert torch.equal(loss, off_loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, off_grads))
    assert off.offloaded_bytes > 0 and off._by_layer == {}  # every layer was fetched back
    assert off._asked == {0, 1, 2}  # the last layer stays: nothing of it was packed


def test_torch_save_on_cpu_per_layer_also_leaves_the_gradients():
    loss, grads, _ = _grads(torch.float32)
    hooks = []
    off_loss, off_grads, _ = _grads(
        torch.float32,
        lambda ls: hooks.append(per_layer(ls, torch.autograd.graph.save_on_cpu)) or None,
    )
    assert torch.equal(loss, off_loss)
    assert all(torch.equal(a, b) for a, b in zip(grads, off_grads))
    hooks[0].remove()


def test_offloaded_bytes_are_the_models_count():
    """What the pack hook moves per forward: the model's (L - 1) layers, plus RoPE's cos and sin
    (2 s·d·e bytes, one storage each, seen once per layer)."""
    model = build_llama(TINY.config(attn="sdpa"), dtype=torch.bfloat16)
    ids = torch.randint(0, TINY.vocab, (2, 32), generator=torch.Generator().manual_seed(0))
    with ActivationOffload(model.model.layers, min_bytes=0) as off:
        model(input_ids=ids, labels=ids).loss.backward()
    layout = PlanLayout(
        plugin="hybrid", precision="bf16", micro_batch=2, seq=32, world=1, shape=TINY
    )
    per_layer_bytes = predict(layout)["per_layer"]
    rope = 2 * 32 * (TINY.hidden // TINY.heads) * 2
    assert off.offloaded_bytes == (TINY.layers - 1) * (per_layer_bytes + rope)


def test_the_model_term_by_hand():
    """h = 64, f = 192, a = 4, N = 2·32 tokens, bf16, on the CPU: per layer 2(8·Nh + 4N) for the
    norms, 8Nh for q, k, v and the o_proj input, 2Nh + 4Na for sdpa, 8Nf for the MLP."""
    n, h, f, a = 64, 64, 192, 4
    layer = 2 * (8 * n * h + 4 * n) + 8 * n * h + 2 * n * h + 4 * n * a + 8 * n * f
    assert layer == 206_336
    common = dict(plugin="hybrid", precision="bf16", micro_batch=2, seq=32, world=1, shape=TINY)
    plain = predict(PlanLayout(**common))
    off = predict(PlanLayout(**common, offload_activations=True))
    assert plain["activations"] == 4 * layer == 825_344 and plain["offloaded"] == 0
    assert off["activations"] == 2 * layer == 412_672
    assert off["offloaded"] == 3 * layer == 619_008
    start = "backward_start"  # the phase the activations count in
    assert plain["phases"][start] - off["phases"][start] == pytest.approx(2 * layer)


def test_the_time_term_by_hand():
    hidden = offload_seconds(8e9, 50e9, 50e9, 0.6)  # 0.16 s of copies under 0.2 s and 0.4 s
    assert hidden["exposed_s"] == 0 and hidden["step_s"] == 0.6
    exposed = offload_seconds(60e9, 50e9, 40e9, 0.6)  # 1.2 - 0.2 out, 1.5 - 0.4 back
    assert exposed["out_s"] == pytest.approx(1.2) and exposed["in_s"] == pytest.approx(1.5)
    assert exposed["exposed_s"] == pytest.approx(2.1) and exposed["step_s"] == pytest.approx(2.7)


@pytest.mark.parametrize(
    "call",
    [
        lambda: offload_seconds(1e9, 0, 1e9, 1.0),
        lambda: offload_seconds(-1, 1e9, 1e9, 1.0),
        lambda: offload_seconds(1e9, 1e9, 1e9, 1.0, forward_share=1.5),
        lambda: PlanLayout(plugin="hybrid", recompute=True, offload_activations=True),
        lambda: PlanLayout(plugin="hybrid", pp=2, microbatches=2, offload_activations=True),
        lambda: ActivationOffload([torch.nn.Linear(2, 2)], min_bytes=-1),
        lambda: ActivationOffload([]),
    ],
)
def test_bad_input_is_refused(call):
    with pytest.raises(ValueError):
        call()


def test_the_recorder_refuses_a_machine_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        cli.main(["offload", "--quick"])
    assert "needs a CUDA GPU" in str(e.value)


@pytest.mark.parametrize("argv", [["--gpus", "2"], ["--steps", "0"], ["--micro_batch", "-1"]])
def test_the_recorder_refuses_bad_flags(argv):
    with pytest.raises(SystemExit):
        cli.parse("offload", argv)


def test_the_micro_batches_follow_the_model():
    assert recorder.choose(79 * GIB, 120 * GIB) == {
        "b": 8,
        "B": 20,
        "why": "the smallest micro-batch the model says the baseline cannot fit",
    }
    small_host = recorder.choose(140 * GIB, 120 * GIB)  # the out-of-memory batch would not fit
    assert small_host["b"] == 16 and small_host["B"] <= 32 and "host" in small_host["why"]


def _fake(mode, micro_batch, warmup, steps):
    """A measured row as :func:`helpers.train.offload_run.measure` returns it."""
    if mode == "none" and micro_batch > 16:
        return {"mode": mode, "micro_batch": micro_batch, "ok": False, "oom": True, "error": "OOM"}
    drift = 0.2 if mode == "save_on_cpu" else 0.0  # a row whose losses leave the reference
    return {
        "mode": mode,
        "micro_batch": micro_batch,
        "ok": True,
        "oom": False,
        "losses": [5.0 + drift, 4.5 + drift, 4.0 + drift],
        "tokens_per_s": 1000,
        "peak_gib": 10.0,
        "offloaded_bytes": 10**9 if "offload" in mode else 0,
    }


def test_the_record_is_written_from_a_fake_measurement(monkeypatch, tmp_path):
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    args = types.SimpleNamespace(
        quick=False, micro_batch=16, large_micro_batch=24, warmup=1, steps=2, budget_s=100.0
    )
    args.record, args.copy_to = True, None
    bandwidth = {"device_to_host": {"256": 50.0}, "host_to_device": {"256": 52.0}}
    recorder.run_all(args, _fake, bandwidth, 140 * GIB, 200 * GIB, "python -m helpers.record")
    [path] = tmp_path.glob(f"*/{recorder.RECORD}.json")
    record = json.loads(path.read_text())
    assert record["provenance"]["command"] == "python -m helpers.record"
    assert record["bandwidth"] == bandwidth and record["choice"]["B"] == 24
    runs = {r["name"]: r for r in record["runs"]}
    assert [r["name"] for r in record["runs"]] == [c[0] for c in recorder.CONFIGS]
    assert runs["offload"]["loss_reference"] == "baseline" and runs["offload"]["loss_ok"]
    assert runs["save_on_cpu"]["max_loss_gap"] == 0.2 and not runs["save_on_cpu"]["loss_ok"]
    big = runs["baseline, larger micro-batch"]
    assert big["oom"] and not big["ok"] and "loss_ok" not in big
    assert runs["offload, larger micro-batch"]["loss_reference"] == "recompute, larger micro-batch"


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_row_runs_on_the_cpu_under_fsdp2(one_rank):
    """The GPU row's code, on the CPU with a tiny shape: offload moves bytes and keeps the loss."""
    tiny = ModelShape.llama(layers=3, hidden=64, heads=4, kv_heads=4, vocab=256)
    plain = measure(tiny, 32, 3e-4, "none", 2, 1, 1)
    off = measure(tiny, 32, 3e-4, "offload", 2, 1, 1, min_bytes=0)
    assert plain["ok"] and off["ok"], (plain.get("error"), off.get("error"))
    assert off["losses"] == plain["losses"] and off["offloaded_bytes"] > 0
