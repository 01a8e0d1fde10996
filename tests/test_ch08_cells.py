"""Chapter 8's notebook glue (helpers.chapters.ch08_labs) on hand-made lab runs: the RESULT line
read back, the kernel-lock lines as the notebook printed them, and the table of verdicts."""

import json

import pytest

from helpers.chapters import ch08_labs as labs_show
from helpers.train.diagnose import Diagnosis
from helpers.train.labs import LABS, LabRun


def _run(name: str, log: str, kind: str = "none", fix: str = "") -> LabRun:
    return LabRun(name, ["python"], 0, 1.0, log, Diagnosis(kind, "", fix, ""))


KERNEL_LOCK = {
    "held_by_run1": True,
    "kept_while_held": True,
    "run1_exit": -9,
    "lock_left": True,
    "run2_silent": True,
    "stale_found": 1,
    "removed": 1,
    "run3_exit": 0,
    "run3_finished": True,
    "lock_after": False,
}


def test_lab_result_reads_the_first_result_line():
    log = "step 1\nRESULT " + json.dumps({"rank": 0, "a": 1}) + '\nRESULT {"rank": 1}\n'
    assert labs_show.lab_result(_run("x", log)) == {"rank": 0, "a": 1}
    with pytest.raises(ValueError, match="no RESULT line"):
        labs_show.lab_result(_run("x", "step 1\nstep 2\n"))


def test_kernel_lock_lines_are_what_print_wrote():
    lines = labs_show.kernel_lock_lines(KERNEL_LOCK, "none")
    assert lines == [
        "run 1 held the lock: True | kept while it lived: True | run 1 exit code: -9 "
        "| lock left behind: True",
        "run 2 silent until the timeout: True | stale locks found: 1 | removed: 1",
        "run 3 exit code: 0 | finished: True | lock after: False | diagnosis: none",
    ]


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
