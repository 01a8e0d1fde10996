"""Chapter 8's notebook glue (helpers.chapters.ch08_labs) on hand-made lab runs: the RESULT line
read back, verdicts printed within the page's width, the steps each rank finished, and the table
of verdicts."""

import json

import pytest

from helpers.chapters import ch08_labs as labs_show
from helpers.train.diagnose import Diagnosis
from helpers.train.labs import LABS, LabRun


def _run(name: str, log: str, kind: str = "none", fix: str = "") -> LabRun:
    return LabRun(name, ["python"], 0, 1.0, log, Diagnosis(kind, "", fix, ""))


def test_lab_result_reads_the_first_result_line():
    log = "step 1\nRESULT " + json.dumps({"rank": 0, "a": 1}) + '\nRESULT {"rank": 1}\n'
    assert labs_show.lab_result(_run("x", log)) == {"rank": 0, "a": 1}
    with pytest.raises(ValueError, match="no RESULT line"):
        labs_show.lab_result(_run("x", "step 1\nstep 2\n"))


def test_verdicts_fit_the_page():
    """A diagnosis is printed within the page's 100 columns, long paths broken."""
    d = Diagnosis("stale_kernel_lock", "a run was killed " * 12, "rm /tmp/" + "x" * 150, "")
    lines = labs_show.verdict(d).splitlines()
    assert lines[0].startswith("stale_kernel_lock | a run was killed")
    assert any(ln.startswith("fix: rm /tmp/") for ln in lines)
    assert max(map(len, lines)) <= labs_show.WIDTH
    assert labs_show.verdict(Diagnosis("none", "no failure in the log", "", "")) == (
        "none | no failure in the log"
    )


def test_steps_done_reads_each_ranks_step_lines():
    log = "rank 0 step 0 loss 1\nrank 1 step 1: no batch\nrank 1 step 1 loss 2\n"
    log += "rank 0 step 1 loss 3\n"
    assert labs_show.steps_done(log) == {0: [0, 1], 1: [1]}


def test_every_lab_has_an_expected_kind_and_rows_keep_the_order():
    assert set(labs_show.EXPECTED_KINDS) == set(LABS)
    assert labs_show.EXPECTED_KINDS["cpu_oom"] == "out_of_memory"
    assert labs_show.EXPECTED_KINDS["stale_kernel_lock_cleared"] == "none"
    labs = {
        "nan_loss": _run("nan_loss", "", "nan_loss", "lower the learning rate"),
        "cpu_oom_recompute": _run("cpu_oom_recompute", ""),
    }
    assert labs_show.lab_rows(labs) == [
        {"lab": "nan_loss", "diagnosis": "nan_loss", "fix": "lower the learning rate"},
        {"lab": "cpu_oom_recompute", "diagnosis": "none", "fix": "—"},
    ]
