"""Chapter 6's four-framework head-to-head (helpers.chapters.ch06_h2h and ch06_choice):
the table, the kernel split per sequence, the glued numbers and the verdict "a gap" or "level",
read from the recorded one-GPU record and from records changed on purpose."""

from __future__ import annotations

import copy

import pytest

from helpers.chapters import ch06_choice as choice
from helpers.chapters import ch06_h2h
from helpers.record import ch06 as h2h
from helpers.record.results import recorded


@pytest.fixture(scope="module")
def record():
    rec = recorded(h2h.RECORD, gpus=1)
    if rec is None:
        pytest.skip("the one-GPU head-to-head is not recorded")
    return rec


def test_plan_while_not_recorded():
    rows, columns = ch06_h2h.h2h_rows(None)
    assert columns == ch06_h2h.PLAN_COLUMNS and len(rows) == len(h2h.ROWS)


def test_one_row_per_framework_with_the_memory_model(record):
    rows, columns = ch06_h2h.h2h_rows(record)
    assert [r["framework and levers"].split(" ")[0] for r in rows] == [
        "Colossal-AI",
        "PyTorch",
        "DeepSpeed",
        "Megatron-Core",
    ]
    assert all(set(r) == set(columns) for r in rows)
    assert rows[-1]["model GiB"] == "—" and all(float(r["model GiB"]) > 0 for r in rows[:3])


def test_kernel_split_fits_in_the_step(record):
    # the profiled step is one step of its own, and kernels of two streams may overlap: the
    # classes add up to the timed step within a few per cent
    for r in ch06_h2h.kernel_rows(record):
        classes = ch06_h2h.kernel_columns([r])[3:]
        assert 0.5 * r["step"] < sum(r[c] for c in classes) <= 1.02 * r["step"]


def test_numbers_and_the_verdict(record):
    h = ch06_h2h.numbers(record)
    assert "ch06-h2h-fsdp2-vs-fsdp2" not in h and h["ch06-h2h-colossal-vs-fsdp2"] > 0
    assert h["ch06-h2h-megatron-oom-mbs"] > h["ch06-h2h-megatron-mbs"]
    level = "within the spreads"
    assert level in choice._h2h_text(h, "colossal")
    # the same ratio with spreads ten times smaller is a gap
    tight = {k: v / 10 if k.endswith("-spread") else v for k, v in h.items()}
    gap = 100 * abs(1 - h["ch06-h2h-colossal-vs-fsdp2"])
    expect_gap = gap > tight["ch06-h2h-colossal-spread"] + tight["ch06-h2h-fsdp2-spread"]
    assert ("beyond" in choice._h2h_text(tight, "colossal")) == expect_gap


def test_a_failed_round_is_left_out(record):
    rec = copy.deepcopy(record)
    first = next(r for r in rec["runs"] if r["summary"].get("framework") == "deepspeed")
    first["summary"]["ok"] = False
    rows, _ = ch06_h2h.h2h_rows(rec)
    assert len(rows) == 4  # the other rounds still make the row
