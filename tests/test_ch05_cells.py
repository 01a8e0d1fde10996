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


def test_rank_log_drops_results_and_fits_the_page():
    long = "step   2/8 | loss 4.8169 | " + "x " * 80
    text = launch_show.rank_log([long, 'RESULT {"step": 2}', "saved step_00000003"])
    assert "RESULT" not in text and text.endswith("saved step_00000003")
    assert all(len(line) <= 100 for line in text.splitlines())
    assert text.splitlines()[1].startswith("    ")  # a continuation is indented


def test_command_text_fits_the_page_and_still_pastes():
    words = ["torchrun", "--nnodes", "2"] + [f"--flag{i} value{i}" for i in range(20)]
    text = launch_show.command_text(" ".join(words))
    lines = text.splitlines()
    assert len(lines) > 1 and all(len(line) <= 100 for line in lines)
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert text.replace(" \\\n    ", " ") == " ".join(words)  # the same words, in order


def test_sacct_rows_read_the_fixed_width_table():
    from helpers.chapters.ch05_multinode import sacct_rows

    lines = [
        "JobID           JobName  Partition      State ExitCode",
        "------------ ---------- ---------- ---------- --------",
        "1                  ch05       book  COMPLETED      0:0",
    ]
    assert sacct_rows(lines) == [
        {"JobID": "1", "JobName": "ch05", "Partition": "book", "State": "COMPLETED",
         "ExitCode": "0:0"}
    ]  # fmt: skip


def test_source_line_is_short_and_names_no_commit():
    from helpers.chapters.ch05_multinode import source_line

    run = {
        "source": "recorded",
        "why_not_live": "not installed: sshd",
        "provenance": {"date": "2026-12-02 21:29 UTC", "git_commit": "1c5d4a3c48ab" * 3},
    }
    line = source_line(run)
    assert "1c5d4a3c48" not in line and "2026-12-02" in line and len(line) <= 100
