"""helpers.parallel.layouts: G = D × T × P (× S), the seed's enumeration, and every rule it
forgets."""

import pytest

from helpers.parallel.layouts import (
    QWEN2_7B,
    Layout,
    data_degree,
    factor_parallelism,
    feasible_layouts,
    validate,
    violations,
)
from helpers.parallel.mesh import RankMesh
from helpers.models.shape import ModelShape

SEED_32 = [
    (32, 1, 1),
    (16, 1, 2),
    (8, 1, 4),
    (16, 2, 1),
    (8, 2, 2),
    (4, 2, 4),
    (8, 4, 1),
    (4, 4, 2),
    (2, 4, 4),
    (4, 8, 1),
    (2, 8, 2),
    (1, 8, 4),
]


def test_factor_parallelism_of_32_is_the_seeds():
    assert factor_parallelism(32) == SEED_32


@pytest.mark.parametrize("G", [1, 2, 6, 7, 12, 24, 64, 96, 128])
@pytest.mark.parametrize("max_tp, max_pp", [(8, 4), (4, 8), (16, 16)])
def test_factor_parallelism_matches_the_seed_everywhere(G, max_tp, max_pp):
    # the seed's double loop as a specification: tp outer, pp inner, every tp·pp dividing G
    spec = [
        (G // (tp * pp), tp, pp)
        for tp in range(1, max_tp + 1)
        for pp in range(1, max_pp + 1)
        if G % (tp * pp) == 0
    ]
    assert factor_parallelism(G, max_tp, max_pp) == spec


def test_data_degree_of_the_seeds_example():
    assert data_degree(64, tp=4, pp=2) == 8
    assert Layout.for_world(64, tp=4, pp=2) == Layout(dp=8, tp=4, pp=2)
    assert str(Layout.for_world(64, tp=4, pp=2)) == "D=8 × T=4 × P=2"


@pytest.mark.parametrize(
    "args, message",
    [
        (
            (64, 3, 2),
            "64 GPUs cannot be split as tensor=3 × pipeline=2: 6 does not divide 64; "
            "try tensor 2 or 4",
        ),
        (
            (8, 4, 4),
            "8 GPUs cannot be split as tensor=4 × pipeline=4: 16 does not divide 8; "
            "try tensor 2, or pipeline 2",
        ),
        (
            (24, 1, 5),
            "24 GPUs cannot be split as tensor=1 × pipeline=5: 5 does not divide 24; "
            "try pipeline 4 or 6",
        ),
        (
            (16, 2, 2, 3, "all_to_all"),
            "16 GPUs cannot be split as tensor=2 × pipeline=2 × sequence=3: 12 does not divide 16; "
            "try sequence 2 or 4",
        ),
    ],
)
def test_a_remainder_is_refused_with_the_numbers_and_a_fix(args, message):
    with pytest.raises(ValueError) as err:
        data_degree(*args)
    assert str(err.value) == message


def test_sequence_axis_counts_only_for_its_own_axis_modes():
    assert data_degree(16, 2, 2, 2, "all_to_all") == 2  # S has its own axis: 16 / (2·2·2)
    assert data_degree(16, 2, 2, 2, "ring_attn") == 2
    assert data_degree(16, 2, 2, 1, "split_gather") == 4  # S = T reuses the tp group: 16 / (2·2)
    assert data_degree(16, 2, 2, 2, "split_gather") == 4  # sp=T is the same statement
    assert data_degree(16, 4, 1, 1, "ring") == 4
    layout = Layout.for_world(16, tp=2, pp=2, sp=2, sp_mode="split_gather")
    assert (layout.sp, layout.seq_degree, layout.world_size) == (1, 2, 16)
    layout = Layout.for_world(16, tp=2, pp=2, sp=2, sp_mode="all_to_all")
    assert (layout.dp, layout.sp, layout.seq_degree, layout.world_size) == (2, 2, 2, 16)
    assert str(layout) == "D=2 × T=2 × P=2 × S=2 (all_to_all)"


@pytest.mark.parametrize(
    "args, match",
    [
        ((16, 2, 1, 2, None), "sp=2 needs a sequence parallelism mode"),
        ((16, 1, 2, 1, "split_gather"), "needs tp > 1"),
        ((16, 4, 1, 2, "ring"), "S = T = 4; sp=2 would be ignored"),
        ((16, 2, 1, 2, "ulysses"), "unknown sequence parallelism mode 'ulysses'"),
        ((0, 1, 1), "G must be a positive integer"),
        ((8, 2.0, 1), "tp must be a positive integer"),
        ((8, 1, -1), "pp must be a positive integer"),
    ],
)
def test_bad_sequence_settings_and_sizes_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        data_degree(*args)


def test_layout_gives_the_mesh_and_plugin_arguments():
    layout = Layout.for_world(8, tp=2, pp=2, microbatch=1)
    assert layout.mesh() == RankMesh(dp=2, pp=2, tp=2)
    assert layout.plugin_kwargs() == {
        "tp_size": 2,
        "pp_size": 2,
        "zero_stage": 0,
        "microbatch_size": 1,
    }
    ulysses = Layout.for_world(8, tp=2, sp=2, sp_mode="all_to_all")
    assert ulysses.plugin_kwargs() == {
        "tp_size": 2,
        "pp_size": 1,
        "zero_stage": 0,
        "enable_sequence_parallelism": True,
        "sequence_parallelism_mode": "all_to_all",
        "sp_size": 2,
    }
    assert ulysses.mesh() == RankMesh(dp=2, pp=1, tp=2, sp=2)
    with pytest.raises(ValueError, match=r"\(dp, pp, sp, tp\)"):
        Layout.for_world(8, tp=2, sp=2, sp_mode="ring_attn").mesh()


MODEL = ModelShape(layers=28, heads=28, kv_heads=4, seq_len=4096)


@pytest.mark.parametrize(
    "layout, model, batch, reason",
    [
        (Layout(4, 8, 1, microbatch=1), MODEL, None, "28 attention heads are not divisible by T=8"),
        (Layout(4, 8, 1, microbatch=1), MODEL, None, "4 KV heads are not divisible by T=8"),
        (
            Layout(8, 1, 4, microbatch=1),
            ModelShape(layers=30, heads=32),
            None,
            "30 layers do not split evenly into P=4 stages",
        ),
        (
            Layout(8, 2, 2, microbatch=3),
            MODEL,
            64,
            "global batch 64 is not divisible by D × micro-batch = 8 × 3",
        ),
        (
            Layout(8, 1, 4, microbatch=4),
            MODEL,
            64,
            "m=2 micro-batches per step < P=4 stages (1F1B needs m ≥ P)",
        ),
        (
            Layout(8, 2, 2),
            None,
            None,
            "P=2 needs micro-batches (num_microbatches or microbatch_size)",
        ),
        (
            Layout(8, 2, 2, microbatch=1, zero_stage=2),
            None,
            None,
            "ZeRO stage 2 with P=2: the plugin allows only stage 0 or 1",
        ),
        (Layout(8, 2, 1, zero_stage=3), None, None, "ZeRO stage 3 is not 0, 1 or 2"),
        (
            Layout(4, 2, 2, microbatch=1, chunks=2),
            ModelShape(6, 8, 8),
            8,
            "2 chunks per stage with P=2: interleaving needs",
        ),
        (
            Layout(8, 1, 1, sp_mode="split_gather"),
            None,
            None,
            "split_gather sequence parallelism reuses the tensor group: needs T > 1",
        ),
        (Layout(4, 1, 1, sp=2), None, None, "S=2 needs a sequence mode with an own axis"),
        (
            Layout(2, 2, 1, sp=4, sp_mode="all_to_all"),
            MODEL,
            None,
            "28 attention heads are not divisible by T×S=8",
        ),
        (
            Layout(2, 2, 1, sp=2, sp_mode="all_to_all"),
            ModelShape(2, 8, 2),
            None,
            "2 KV heads are not divisible by T×S=4",
        ),
        (
            Layout(4, 1, 1, sp=2, sp_mode="all_to_all"),
            ModelShape(2, 8, 8, seq_len=1001),
            None,
            "sequence length 1001 is not divisible by 2",
        ),
        (
            Layout(4, 1, 1, sp=4, sp_mode="ring_attn"),
            ModelShape(2, 8, 8, seq_len=4100),
            None,
            "sequence length 4100 is not divisible by 8",
        ),
        (Layout(4, 1, 1, sp_mode="bogus"), None, None, "unknown sequence parallelism mode 'bogus'"),
    ],
)
def test_every_rule_rejects_with_its_message(layout, model, batch, reason):
    assert reason in " | ".join(violations(layout, model, batch))
    with pytest.raises(ValueError, match="cannot run"):
        validate(layout, model, batch)


def test_kv_heads_must_not_be_fewer_than_t_after_ulysses():
    # 8 KV heads / S=4 leaves 2 per sequence rank: T=4 would need 4
    # (Llama policy: kv_heads >= tp_size)
    assert violations(Layout(1, 4, 1, sp=4, sp_mode="all_to_all"), ModelShape(2, 16, 8)) == [
        "8 KV heads are not divisible by T×S=16"
    ]


def test_a_layout_that_follows_every_rule_passes():
    layout = Layout(4, 4, 2, microbatch=4, zero_stage=1)
    assert violations(layout, QWEN2_7B, 64) == []
    assert validate(layout, QWEN2_7B, 64) is layout


def test_feasible_layouts_of_the_chapter_example():
    search = feasible_layouts(32, QWEN2_7B, global_batch=64, microbatch=4)
    every = [(x.dp, x.tp, x.pp) for x in search.feasible] + [
        (x.dp, x.tp, x.pp) for x, _ in search.rejected
    ]
    assert sorted(every) == sorted(SEED_32)  # the seed's candidates, each either kept or rejected
    assert [(x.dp, x.tp, x.pp) for x in search.feasible] == [
        (16, 2, 1),
        (8, 2, 2),
        (4, 2, 4),
        (8, 4, 1),
        (4, 4, 2),
        (2, 4, 4),
    ]
    reasons = {(x.dp, x.tp, x.pp): why for x, why in search.rejected}
    assert reasons[(32, 1, 1)] == ["global batch 64 is not divisible by D × micro-batch = 32 × 4"]
    assert reasons[(16, 1, 2)] == ["m=1 micro-batches per step < P=2 stages (1F1B needs m ≥ P)"]
    assert reasons[(8, 1, 4)] == ["m=2 micro-batches per step < P=4 stages (1F1B needs m ≥ P)"]
    for key in [(4, 8, 1), (2, 8, 2), (1, 8, 4)]:
        assert reasons[key] == [
            "28 attention heads are not divisible by T=8",
            "4 KV heads are not divisible by T=8",
        ]


def test_feasible_layouts_with_sequence_modes_all_fill_the_world():
    search = feasible_layouts(32, QWEN2_7B, 64, 1, sp_modes=(None, "split_gather", "all_to_all"))
    assert search.feasible and search.rejected
    for layout in search.feasible:
        assert layout.world_size == 32 and validate(layout, QWEN2_7B, 64)
        assert data_degree(32, layout.tp, layout.pp, layout.sp, layout.sp_mode) == layout.dp
    split_gather_t1 = [x for x, _ in search.rejected if x.sp_mode == "split_gather" and x.tp == 1]
    assert split_gather_t1  # offered and refused: it needs T > 1


# --- one layout type: Degrees, from YAML to the plugin and the rank grid -----------------------


def test_degrees_name_every_field_once_and_derive_the_data_degree():
    from dataclasses import fields

    from helpers.parallel.degrees import COLOSSALAI, NAMES, Degrees

    assert list(NAMES) == [f.name for f in fields(Degrees)]  # a renamed degree fails here
    assert COLOSSALAI["tensor"] == "tp_size" and COLOSSALAI["pipeline"] == "pp_size"
    d = Degrees.from_world(16, tensor=2, pipeline=2, sequence=2, sequence_mode="all_to_all")
    assert (d.data, d.own_sequence, d.world, d.model_parallel) == (2, 2, 16, 8)
    assert d.flags() == ["--tp", "2", "--pp", "2", "--sp", "2", "--sp_mode", "all_to_all"]
    assert d.colossalai() == {
        "tp_size": 2,
        "pp_size": 2,
        "enable_sequence_parallelism": True,
        "sequence_parallelism_mode": "all_to_all",
        "sp_size": 2,
    }
    shared = Degrees.from_world(8, tensor=2, sequence=2, sequence_mode="split_gather")
    assert shared.data == 4 and shared.flags() == ["--tp", "2", "--sp_mode", "split_gather"]
    assert Degrees(None, tensor=1).flags("tensor") == ["--tp", "1"]
    for bad in (dict(sequence=2), dict(data=3, expert=2), dict(tensor=0)):
        with pytest.raises(ValueError):
            Degrees(**bad)


def test_a_config_a_layout_and_the_rank_grid_share_the_degrees():
    from helpers.config.loading import load_config
    from helpers.config.plugin import plugin_spec
    from helpers.parallel.degrees import Degrees

    raw = {
        "parallelism": {"data": "auto", "tensor": 2, "pipeline": 2, "microbatches": 2},
        "train": {"batch_size": 8, "learning_rate": 3e-4, "precision": "bf16", "save_interval": 2},
    }
    cfg = load_config(raw, world_size=8)
    assert cfg.degrees == Degrees(2, 2, 2)
    assert load_config(raw).degrees.data is None  # data: auto before the world is known
    assert cfg.degrees.colossalai().items() <= plugin_spec(cfg).kwargs.items()
    layout = Layout.for_world(8, tp=2, pp=2)
    assert layout.degrees == cfg.degrees and RankMesh.of(layout.degrees) == layout.mesh()
