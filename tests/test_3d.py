"""Chapter 2's from-scratch D x P x T demo (helpers/demos/ch02_3d.py) on gloo at 4 and 8 processes:
the CPU versions of Chapter 2's 4- and 8-GPU layouts. Each run checks itself against the unsplit
model inside every rank; the tests check that it did, and that the groups are the mesh's."""

import pytest

from helpers.run.launch import launch
from helpers.parallel.mesh import RankMesh

LAYOUTS = [  # (processes, pp, tp): D = processes / (pp * tp)
    (8, 2, 2),  # the seed's three dimensions at small scale: 2 x 2 x 2
    (4, 2, 2),  # tp=2 x pp=2
    (4, 1, 2),  # tp=2 x dp=2
    (4, 2, 1),  # dp=2 x pp=2
]


@pytest.mark.parametrize(
    "nproc,pp,tp", LAYOUTS, ids=[f"{n}ranks-pp{p}-tp{t}" for n, p, t in LAYOUTS]
)
def test_3d_layout_matches_the_unsplit_model(nproc, pp, tp):
    result = launch(
        "ch02_3d", nproc, ["--pp", str(pp), "--tp", str(tp)], timeout_s=240, show="none"
    )
    runs = sorted(result.results, key=lambda r: r["rank"])
    assert len(runs) == nproc
    mesh = RankMesh.for_world(nproc, pp=pp, tp=tp)
    for r in runs:
        assert (
            r["dp"] == nproc // (pp * tp)
            and r["max_grad_diff"] < 1e-5
            and r["max_weight_diff"] < 1e-5
        )
        assert r["losses"] == r["ref_losses"]  # 4 significant digits
        assert r["groups"] == {axis: mesh.group_of(r["rank"], axis) for axis in ("dp", "pp", "tp")}
    assert len({tuple(r["losses"]) for r in runs}) == 1  # every rank reports the same global loss


def test_tensor_times_data_parallel_with_zero1_matches_unsharded_adam():
    """tp=2 x dp=2 with ZeRO-1 (a 4-GPU layout of Chapter 2, on gloo): Adam states sharded over
    each data group; after every step the weight shards equal the unsplit model trained with
    plain Adam."""
    import math

    result = launch(
        "ch02_3d",
        4,
        ["--pp", "1", "--tp", "2", "--optimizer", "zero1", "--steps", "3", "--lr", "0.01"],
        timeout_s=240,
        show="none",
    )
    h, layers = (
        8,
        4,
    )  # the demo's defaults: each rank holds A (h x 2h), a (2h), B (2h x h), b (h) per block
    per_rank = layers * (h * 2 * h + 2 * h + 2 * h * h + h)
    for r in result.results:
        assert (
            r["optimizer"] == "zero1" and r["max_grad_diff"] is None and r["max_weight_diff"] < 1e-5
        )
        assert r["losses"] == r["ref_losses"]
        assert r["adam_state_elements"] == 2 * math.ceil(
            per_rank / 2
        )  # m and v for half of this rank's shards


def test_3d_layout_refuses_a_world_that_does_not_factor():
    from helpers.run.launch import LaunchError

    with pytest.raises(LaunchError, match="not divisible|cannot|divid"):
        launch(
            "ch02_3d", 4, ["--pp", "3", "--tp", "1", "--layers", "3"], timeout_s=120, show="none"
        )


def test_sequence_times_data_parallel_on_four_ranks():
    """sp=2 x dp=2 (a 4-GPU layout of Chapter 2, on gloo): Ulysses inside each replica's
    sequence group."""
    result = launch("ch01_sp", 4, ["--dp", "2", "--batch", "4"], timeout_s=240, show="none")
    runs = sorted(result.results, key=lambda r: r["rank"])
    assert [r["sp_group"] for r in runs] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [r["rows"] for r in runs] == [[0, 2], [0, 2], [2, 4], [2, 4]]
    assert [r["tokens"] for r in runs] == [[0, 4], [4, 8], [0, 4], [4, 8]]
    for r in runs:
        assert (
            r["loss"] == r["ref_loss"]
            and max(r["max_out_diff"], r["max_x_grad_diff"], r["max_w_grad_diff"]) < 1e-5
        )
