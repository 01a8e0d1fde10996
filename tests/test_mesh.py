"""helpers.parallel.mesh: the rank grid in Colossal-AI's axis order."""

import itertools

import pytest
from colossalai.cluster import ProcessGroupMesh

from helpers.parallel.mesh import RankMesh
from helpers.parallel.vocab import AXES


def test_groups_of_dp2_pp2_tp2_match_the_known_layout():
    mesh = RankMesh(dp=2, pp=2, tp=2)
    assert mesh.groups("tp") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert mesh.groups("pp") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert mesh.groups("dp") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert mesh.coords(5) == {"dp": 1, "pp": 0, "tp": 1, "sp": 0}


@pytest.mark.parametrize("shape", [(2, 2, 2, 1), (1, 2, 2, 2), (3, 1, 2, 2), (2, 3, 1, 2)])
def test_coordinates_agree_with_colossalai_process_group_mesh(shape):
    mesh = RankMesh(*shape)
    for rank in range(mesh.world_size):
        assert tuple(mesh.coords(rank).values()) == ProcessGroupMesh.unravel(rank, shape)
        assert mesh.rank_of(**mesh.coords(rank)) == ProcessGroupMesh.ravel(
            ProcessGroupMesh.unravel(rank, shape), shape
        )


@pytest.mark.parametrize("shape", [(2, 2, 2, 1), (2, 1, 2, 2)])
def test_every_axis_partitions_the_world(shape):
    mesh = RankMesh(*shape)
    for axis, size in zip(AXES, shape):
        groups = mesh.groups(axis)
        assert all(len(g) == size for g in groups)
        assert sorted(itertools.chain(*groups)) == list(range(mesh.world_size))
        for g in groups:  # members differ only along this axis
            others = [tuple(v for a, v in mesh.coords(r).items() if a != axis) for r in g]
            assert len(set(others)) == 1


def test_for_world_derives_the_data_degree():
    assert RankMesh.for_world(64, pp=2, tp=4).dp == 8  # the seed's 64 = 8 x 4 x 2
    with pytest.raises(ValueError, match="6 does not divide 64"):
        RankMesh.for_world(64, pp=2, tp=3)


@pytest.mark.parametrize("bad", [{"dp": 0}, {"tp": -2}, {"pp": 1.5}])
def test_bad_sizes_are_rejected(bad):
    with pytest.raises(ValueError, match="must be a positive integer"):
        RankMesh(**bad)


def test_rank_outside_world_is_rejected():
    with pytest.raises(ValueError, match="outside a world of 8"):
        RankMesh(2, 2, 2).coords(8)
