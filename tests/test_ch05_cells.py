"""Chapter 5's notebook glue (helpers.chapters.ch05_launch): the lines of torchrun's failure
report that section 5 prints after a rank is killed."""

from helpers.chapters import ch05_launch as launch_show
from helpers.run.launch import LaunchError
from helpers.run.failure import LAUNCHER

REPORT = [
    "E1202 05:01:02.123 torch/distributed/elastic/multiprocessing/api.py:869] failed",
    "============================================================",
    "helpers.demos.ch05_train FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  time      : 2026-12-02_05:01:02",
    "  rank      : 0 (local_rank: 0)",
    "  exitcode  : -15 (pid: 14308)  (SIGTERM)",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  host      : box",
    "  rank      : 1 (local_rank: 1)",
    "  exitcode  : -9 (pid: 14309)  (SIGKILL)",
    "  error_file: <N/A>",
]


def test_torchrun_failure_keeps_the_headings_ranks_and_exit_codes():
    err = LaunchError("rank 1 failed", 1, {0: ["step 1"], 1: ["FAULT"], LAUNCHER: REPORT}, 1)
    assert launch_show.torchrun_failure(err).splitlines() == [
        "Failures:",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -15 (pid: 14308)  (SIGTERM)",
        "Root Cause (first observed failure):",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : -9 (pid: 14309)  (SIGKILL)",
    ]


def test_torchrun_failure_of_a_silent_launcher_is_empty():
    err = LaunchError("timeout", None, {0: ["step 1"], LAUNCHER: ["W1202 some warning"]}, None)
    assert launch_show.torchrun_failure(err) == ""
