"""Gradient accumulation in Chapter 7's Trainer (helpers.train.layout_step): m micro-batches and one
optimizer step equal the full-batch step; the memory model's held gradients for the one-GPU
accumulation layouts; the recorder's --only group; the chapter's reading of the record."""

import copy
import socket

import pytest
import torch
import torch.distributed as dist

from helpers.parallel.train_layout import TrainLayout
from helpers.cost.memory_llama import predict
from helpers.models.llama import build_llama, token_batch
from helpers.record.ch07_layouts import ACCUMULATION, LAYOUTS, layout_named, layouts_for, plan
from helpers.train.layout_step import Trainer, accumulation_sync, layout_plugin, on_cpu

GIB = 2**30
LR = 1.0  # plain SGD: the weights move by lr · gradient, so equal weights mean equal gradients


@pytest.fixture(scope="module")
def world_of_one():
    """A gloo process group of one rank in this process (TorchDDPPlugin wraps torch DDP in it)."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _cpu_layout(micro_batch: int, microbatches: int) -> TrainLayout:
    layout = TrainLayout(
        "acc", "ddp", "fp32", micro_batch=micro_batch, microbatches=microbatches, world=1
    )
    return on_cpu(layout)  # the demo's gloo path: tiny shape, 64 tokens, micro-batch ≤ 2


def _model(layout: TrainLayout):
    return build_llama(layout.shape.config(attn=layout.attn, max_seq=layout.seq))


def _trainer_step(layout: TrainLayout, model) -> tuple[dict, float]:
    """One Trainer step under TorchDDPPlugin (fp32, gloo): the weights after it and its loss."""
    from colossalai.booster import Booster

    plugin = layout_plugin(layout)
    booster = Booster(plugin=plugin)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model, opt, _, _, _ = booster.boost(model, opt)
    loss = Trainer(layout, booster, model, opt, torch.device("cpu"), plugin).step(0)
    weights = {k: v.detach().clone() for k, v in model.unwrap().state_dict().items()}
    return weights, loss


def _reference_step(layout: TrainLayout, model) -> tuple[dict, float]:
    """The same step by hand: the whole batch in one forward, one backward, SGD."""
    batch = token_batch(0, layout.global_batch, layout.seq, layout.shape.vocab)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loss = model(**batch).loss
    loss.backward()
    opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, float(loss)


@pytest.mark.parametrize(("micro_batch", "m"), [(2, 1), (1, 2), (1, 4)])
def test_accumulated_step_is_the_full_batch_step(world_of_one, micro_batch, m):
    """m micro-batches (loss / m, no_sync but for the last) give the weights of one step on the
    whole batch, computed in one forward in this process."""
    layout = _cpu_layout(micro_batch, m)
    assert layout.global_batch == micro_batch * m
    model = _model(layout)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    ref, ref_loss = _reference_step(layout, copy.deepcopy(model))
    got, loss = _trainer_step(layout, model)
    assert got.keys() == ref.keys()
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], msg=k)
    assert loss == pytest.approx(ref_loss, rel=1e-5)
    moved = sum(float((ref[k] - before[k]).abs().max()) for k in ref)
    assert moved > 1e-2  # the step did change the weights


def test_two_micro_batches_equal_one_doubled(world_of_one):
    """m = 2 of one sequence against m = 1 of two, both through the Trainer."""
    model = _model(_cpu_layout(2, 1))
    one, loss_one = _trainer_step(_cpu_layout(2, 1), copy.deepcopy(model))
    two, loss_two = _trainer_step(_cpu_layout(1, 2), model)
    for k in one:
        torch.testing.assert_close(two[k], one[k], msg=k)
    assert loss_two == pytest.approx(loss_one, rel=1e-5)


def test_demo_accumulates_over_two_gloo_ranks():
    """The demo's gloo path, 2 ranks × 2 micro-batches of one sequence (torch DDP's no_sync but for
    the last): after two steps each rank's loss is the one a single process gets from two AdamW
    steps on the whole 4-sequence batches (the demo's CPU optimizer, lr 1e-4): the last backward
    averages the summed gradients over the ranks. (Adam does not see the 1/m scale of the loss;
    the SGD tests above do.)"""
    from dataclasses import replace

    from helpers.run.launch import launch

    layout = replace(layout_named("DDP fp32"), micro_batch=1, microbatches=2)
    run = launch(
        "ch07_memory", 2, layout.to_args() + ["--warmup", "1", "--steps", "1"], 120, show="none"
    )
    cpu = TrainLayout.from_dict(run.first(0)["layout"])
    assert (cpu.micro_batch, cpu.microbatches, cpu.global_batch) == (1, 2, 4)
    model = _model(cpu)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for k in range(2):  # the warm-up step and the measured one
        model(**token_batch(k, 4, cpu.seq, cpu.shape.vocab)).loss.backward()
        opt.step()
        opt.zero_grad()
    with torch.no_grad():
        third = token_batch(2, 4, cpu.seq, cpu.shape.vocab)
        for rank in (0, 1):
            rows = {k: v[rank::2] for k, v in third.items()}
            expected = float(model(**rows).loss)
            assert run.first(rank)["loss_last"] == pytest.approx(expected, rel=1e-4)


def test_which_plugins_accumulate_under_no_sync():
    """no_sync where the plugin has it (TorchDDP, Hybrid ZeRO 0/1, LowLevelZero ZeRO-1); ZeRO-2
    reduces every micro-batch into its shard; Gemini is refused."""
    T = TrainLayout
    assert accumulation_sync(T("a", "ddp", "fp32", microbatches=2))
    assert accumulation_sync(T("a", "hybrid", "bf16", microbatches=2))
    assert accumulation_sync(T("a", "hybrid", "bf16", zero_stage=1, microbatches=2))
    assert accumulation_sync(T("a", "zero", "bf16", zero_stage=1, microbatches=2))
    assert not accumulation_sync(T("a", "zero", "bf16", zero_stage=2, microbatches=2))
    assert not accumulation_sync(T("a", "hybrid", "bf16", zero_stage=2, microbatches=2))
    with pytest.raises(ValueError, match="enable_gradient_accumulation"):
        accumulation_sync(T("a", "gemini", "bf16", microbatches=2))


def test_model_holds_the_gradients_once_from_m_2_on():
    """The H200 layouts: from m = 1 to m = 2 the peak rises by exactly the held bf16 gradients,
    from m = 2 to m = 4 by nothing."""
    assert [x.microbatches for x in ACCUMULATION] == [1, 2, 4, 1, 2, 4]
    for one, two, four in (ACCUMULATION[:3], ACCUMULATION[3:]):
        p1, p2, p4 = (predict(x) for x in (one, two, four))
        grads = p2["states"]["grads"]
        assert grads == 2 * p2["params"]  # bf16, whole at ZeRO 0 and ZeRO-1
        assert p2["peak"] - p1["peak"] == pytest.approx(grads, abs=1)
        assert p4["peak"] == p2["peak"]
        assert p1["peak_phase"] == p2["peak_phase"] == "backward_start"
        assert one.world == 1 and one.global_batch == one.micro_batch


def test_recorder_runs_the_group_only_when_asked_and_only_on_one_gpu():
    from helpers.record import cli

    names = [x.name for x in ACCUMULATION]
    assert plan(1, only=["accumulation"]) == (names, {})
    assert plan(1, only=[names[1], "DDP fp32"]) == (["DDP fp32", names[1]], {})
    with pytest.raises(ValueError, match="--gpus 1"):
        plan(2, only=["accumulation"])
    run, skipped = layouts_for(1)  # the memory table's recordings are unchanged
    assert len(run) + len(skipped) == len(LAYOUTS) and not set(names) & set(run)
    assert plan(1)[0] == run
    assert layout_named(names[2], 1) == ACCUMULATION[2]
    _, args = cli.parse("ch07", ["--gpus", "1", "--only", "accumulation", "--copy_to", "/x"])
    assert args.only == ["accumulation"] and args.copy_to == "/x"


def _synthetic_record(extra_gib: dict[str, float]) -> dict:
    """A one-GPU record whose accumulation runs measured the model's peak plus ``extra_gib``."""
    runs = [{"name": "DDP fp32", "not_run": "skipped", "ok": False, "error": "skipped"}]
    for layout in ACCUMULATION:
        peak = predict(layout)["peak"] + extra_gib.get(layout.name, 0.0) * GIB
        result = {
            "rank": 0,
            "layout": layout.__dict__ | {"shape": layout.shape.__dict__},
            "measured": {"peak": peak, "peak_reserved": peak + GIB, "outside_allocator": GIB},
            "tokens_per_s": 1000.0,
            "prediction": {"peak": predict(layout)["peak"]},
        }
        runs.append({"name": layout.name, "ok": True, "results": [result]})
    return {"provenance": {}, "runs": runs}


def test_chapter_reads_the_accumulation_runs():
    from helpers.chapters.ch07_memory import accumulation_points, accumulation_rows

    names = [x.name for x in ACCUMULATION]
    # the measurement 0.1 GiB above the model at m = 2, on the first plugin
    points = accumulation_points(_synthetic_record({names[1]: 0.1}))
    grads = predict(ACCUMULATION[1])["states"]["grads"] / GIB
    assert [x["m"] for x in points] == [1, 2, 4, 1, 2, 4]
    assert [x["plugin"] for x in points] == ["Hybrid bf16"] * 3 + ["ZeRO-1 bf16"] * 3
    one, two, four = points[:3]
    assert one["over_m1"] == 0.0 and one["over_previous"] is None and one["held"] == 0.0
    assert two["held"] == pytest.approx(grads) and two["over_m1"] == pytest.approx(grads + 0.1)
    assert two["predicted_over_m1"] == pytest.approx(grads)
    assert four["over_previous"] == pytest.approx(-0.1) and four["predicted_over_previous"] == 0
    assert two["error_pct"] == pytest.approx(-100 * 0.1 / two["measured"], rel=1e-6)
    assert all(x["error_pct"] == pytest.approx(0, abs=1e-9) for x in points[3:])
    rows = accumulation_rows(_synthetic_record({}))
    assert rows[1]["measured over m=1 GiB"] == rows[1]["held grads (model) GiB"] == f"{grads:.2f}"
    assert rows[2]["measured over previous m GiB"] == "0.00"
    # no record yet: the predictions alone
    empty = accumulation_rows({"runs": []})
    assert [r["measured peak GiB"] for r in empty] == ["not recorded yet"] * 6
    assert empty[1]["predicted over previous m GiB"] == f"{grads:.2f}"
