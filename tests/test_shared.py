"""helpers.run.shared: within one test run an identical launch is made once and replayed after."""

import json

import pytest

from helpers.run import shared
from helpers.run.launch import LaunchError, launch


@pytest.fixture
def run_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(shared.ENV, str(tmp_path))
    return tmp_path


def _outcomes(folder):
    log = (folder / "log.jsonl").read_text().splitlines()
    return [json.loads(line)["outcome"] for line in log]


def test_an_identical_launch_is_replayed_with_what_it_printed(run_folder, capsys):
    first = launch("selftest", 2, ["--mode", "ok"])
    printed_first = capsys.readouterr().out
    again = launch("selftest", 2, ["--mode", "ok"])
    printed_again = capsys.readouterr().out
    assert again.results == first.results and again.lines == first.lines
    assert again.seconds == first.seconds  # the first run's time: nothing ran again
    assert (
        printed_again == printed_first and "✓ helpers.demos.selftest on 2 rank(s)" in printed_again
    )
    assert _outcomes(run_folder) == ["ran", "reused"]
    assert "1 reused" in shared.summary(run_folder)


def test_other_arguments_other_rank_counts_and_share_false_run_again(run_folder):
    launch("selftest", 2, ["--mode", "ok"], show="none")
    launch("selftest", 1, ["--mode", "ok"], show="none")
    launch("selftest", 2, ["--mode", "silent"], show="none", expect_results=False)
    launch("selftest", 2, ["--mode", "ok"], show="none", share=False)
    assert _outcomes(run_folder) == ["ran", "ran", "ran", "private"]


def test_a_path_argument_or_another_environment_keeps_a_launch_private(run_folder, tmp_path):
    assert shared.key("selftest", 2, ["--dir", str(tmp_path)], {}) is None
    assert shared.key("selftest", 2, ["ckpt"], {}) is not None
    a = shared.key("selftest", 2, [], {"BOOK_BACKEND": "gloo"})
    assert a != shared.key("selftest", 2, [], {"BOOK_BACKEND": "nccl"})


def test_a_failed_launch_is_not_stored(run_folder):
    for _ in range(2):
        with pytest.raises(LaunchError, match="crashed on purpose"):
            launch("selftest", 2, ["--mode", "crash"], show="none")
    assert not list(run_folder.glob("*.json"))


def test_without_the_variable_nothing_is_shared(monkeypatch):
    monkeypatch.delenv(shared.ENV, raising=False)
    assert shared.folder() is None and shared.key("selftest", 2, [], {}) is None
    assert shared.summary() == "shared runs: none logged"
