"""helpers.train.elastic_job (Chapter 8's node faults, Chapter 5's elastic restart) and the timed
D × T step of Chapter 5's mesh orders (helpers.parallel.tp.CommClock, helpers.train.grid3d), in one
process."""

import socket

import pytest
import torch
import torch.distributed as dist

from helpers.train import elastic_job as job


def _run(world, steps, seed, ckpt_dir=None, save_every=2, stop_at=None):
    """The job's loop as the demo runs it, every rank's gradient computed here in turn."""
    model = job.make_model(seed)
    opt = job.make_optimizer(model)
    start, _ = job.resume(ckpt_dir, model, opt)
    for step in range(start, steps if stop_at is None else stop_at):
        job.apply(model, opt, [job.grad_of(model, seed, step, r)[0] for r in range(world)])
        if ckpt_dir and (step + 1) % save_every == 0:
            job.save(ckpt_dir, step + 1, model, opt)
    return job.weights_hash(model), start


def test_a_resumed_job_ends_bitwise_where_the_reference_ends(tmp_path):
    want = job.reference(4, 9, seed=3)
    assert _run(4, 9, 3) == (want, 0)
    _run(4, 9, 3, tmp_path, stop_at=5)  # "killed" after step 5: the last save is step 4
    assert job.latest(tmp_path).name == "step_00000004.pt"
    (tmp_path / "step_00000006.pt.part").write_bytes(b"half")  # a save cut short is never read
    assert _run(4, 9, 3, tmp_path) == (want, 4)
    assert job.reference(4, 9, seed=4) != want and job.reference(2, 9, seed=3) != want


def test_momentum_is_restored_with_the_weights(tmp_path):
    """Without the optimizer's state the resumed run would leave the reference."""
    model = job.make_model(0)
    opt = job.make_optimizer(model)
    job.apply(model, opt, [job.grad_of(model, 0, 0, 0)[0]])
    job.save(tmp_path, 1, model, opt)
    fresh = job.make_model(0)
    fresh_opt = job.make_optimizer(fresh)
    assert job.resume(tmp_path, fresh, fresh_opt)[0] == 1
    assert fresh_opt.state_dict()["state"][0]["momentum_buffer"].abs().sum() > 0


@pytest.fixture
def world_of_one():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield dist.new_group([0])
    dist.destroy_process_group()


def test_a_timed_step_counts_its_collectives_and_matches_the_unsplit_model(world_of_one):
    from helpers.parallel.tp import mlp_blocks, shard_mlp_blocks
    from helpers.train.grid3d import check_unsplit, timed_step

    group = world_of_one
    full = mlp_blocks(2, 16, 0, torch.device("cpu"))
    x, y = torch.randn(4, 3, 16), torch.randn(4, 3, 16)
    params = shard_mlp_blocks(full, [0, 1], 0, 1)
    loss, seconds, comm = timed_step(params, x, y, group, group, 1, None)
    assert 0 < comm < seconds  # f, g and the bucket's all-reduce, each timed
    diffs = check_unsplit(params, full, x, y, loss, group, 1, 0, 1, "one rank")
    assert diffs[0] == 0 and diffs[1] < 1e-6
    for t in [t for q in params + full for t in q.values()]:
        t.grad = None
    again, _, skipped = timed_step(params, x, y, group, group, 1, None, skip=True)
    assert skipped == 0 and torch.equal(again, loss)  # one rank: the sums change nothing
