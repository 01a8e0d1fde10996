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


def test_a_folder_with_state_or_another_environment_keeps_a_launch_private(run_folder, tmp_path):
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "step_3").mkdir()  # something to resume from: state on disk
    assert shared.plan("selftest", 2, ["--dir", str(tmp_path / "ckpt")], {}) is None
    assert shared.plan("selftest", 2, ["ckpt"], {}) is not None  # a word, not a path here
    assert shared.plan("selftest", 2, ["no/such/parent"], {}).outputs == []  # a value with a "/"
    a = shared.plan("selftest", 2, [], {"BOOK_BACKEND": "gloo"})
    assert a.key != shared.plan("selftest", 2, [], {"BOOK_BACKEND": "nccl"}).key


def test_an_output_folder_is_stored_and_copied_into_the_next_callers(run_folder, tmp_path):
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()  # empty, like a fresh tempfile.mkdtemp(); "second" does not exist yet
    first = launch("selftest", 2, ["--out", str(first_dir)], show="none")
    again = launch("selftest", 2, ["--out", str(second_dir)], show="none")
    assert _outcomes(run_folder) == ["ran", "reused"]
    assert (second_dir / "sum.txt").read_text() == (first_dir / "sum.txt").read_text() == "1.0\n"
    assert first.first()["out"] == str(first_dir) and again.first()["out"] == str(second_dir)
    assert f"wrote {second_dir / 'sum.txt'}" in again.lines[0]
    assert not any(str(first_dir) in line for line in again.lines[0])
    # the folder now holds the run's output: a launch naming it runs privately
    assert shared.plan("selftest", 2, ["--out", str(second_dir)], {}) is None


def test_an_input_file_is_keyed_by_its_content(run_folder, tmp_path):
    for name, text in (("a.txt", "same"), ("b.txt", "same"), ("c.txt", "other")):
        (tmp_path / name).write_text(text)
    reads = [
        launch("selftest", 2, ["--read", str(tmp_path / n)], show="none").first()["read"]
        for n in ("a.txt", "b.txt", "c.txt")
    ]
    assert reads == ["same", "same", "other"]
    assert _outcomes(run_folder) == ["ran", "reused", "ran"]


def test_a_failed_launch_is_not_stored(run_folder):
    for _ in range(2):
        with pytest.raises(LaunchError, match="crashed on purpose"):
            launch("selftest", 2, ["--mode", "crash"], show="none")
    assert not list(run_folder.glob("*.json"))


def test_without_the_variable_nothing_is_shared(monkeypatch):
    monkeypatch.delenv(shared.ENV, raising=False)
    assert shared.folder() is None and shared.plan("selftest", 2, [], {}) is None
    assert shared.summary() == "shared runs: none logged"


def test_a_scenario_is_computed_once_per_name_and_material(run_folder, monkeypatch):
    calls = []

    def compute():
        calls.append(1)
        return {"n": len(calls)}

    assert shared.once("scenario", compute, 2) == {"n": 1}
    assert shared.once("scenario", compute, 2) == {"n": 1}  # stored: not run again
    assert shared.once("scenario", compute, 3) == {"n": 2}  # other material: runs
    monkeypatch.setenv("BOOK_EXTRA", "1")
    assert shared.once("scenario", compute, 2) == {"n": 3}  # a deciding variable differs
    assert _outcomes(run_folder) == ["ran", "reused", "ran", "ran"]
    monkeypatch.delenv(shared.ENV)
    assert shared.once("scenario", compute, 2) == {"n": 4}  # sharing off: always runs


def test_a_caller_asking_while_the_run_is_made_waits_for_it(run_folder):
    import threading
    import time

    calls, got = [], []

    def compute():
        calls.append(1)
        time.sleep(0.5)
        return {"n": len(calls)}

    first = threading.Thread(target=lambda: got.append(shared.once("slow", compute)))
    first.start()
    time.sleep(0.1)  # the first caller is computing
    got.append(shared.once("slow", compute))
    first.join()
    assert got == [{"n": 1}, {"n": 1}] and calls == [1]


def test_a_launch_asked_for_while_the_same_one_runs_waits_and_is_replayed(run_folder):
    """The other pytest-xdist worker asking for the same launch at the same time: one runs, the
    other waits for it and is answered from it."""
    import threading

    got, start = [], threading.Barrier(2)

    def ask():
        start.wait()  # both at once
        got.append(launch("selftest", 2, show="none"))

    both = [threading.Thread(target=ask) for _ in range(2)]
    for t in both:
        t.start()
    for t in both:
        t.join()
    assert sorted(_outcomes(run_folder)) == ["ran", "reused"]
    assert got[0].results == got[1].results and got[0].seconds == got[1].seconds


def test_importing_colossalai_does_not_change_a_key(monkeypatch, tmp_path):
    """`import colossalai` sets CUDA_DEVICE_MAX_CONNECTIONS in the caller; a test that imports it
    and a notebook that does not must still share their launch."""
    from helpers.run import shared

    monkeypatch.setenv(shared.ENV, str(tmp_path))
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    before = shared.plan("selftest", 2, ["--mode", "ok"], {})
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    assert shared.plan("selftest", 2, ["--mode", "ok"], {}).key == before.key
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # a deciding variable still changes it
    assert shared.plan("selftest", 2, ["--mode", "ok"], {}).key != before.key


def test_compiling_in_the_test_process_does_not_change_a_key(monkeypatch, tmp_path):
    """torch sets TORCHINDUCTOR_CACHE_DIR in a process that compiles, and Chapter 8's levers point
    it at a folder per SDPA setting: a test that did either still shares the notebooks' launches."""
    from helpers.run import shared
    from helpers.train.levers import separate_compile_cache

    monkeypatch.setenv(shared.ENV, str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    before = shared.plan("selftest", 2, ["--mode", "ok"], {})
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    separate_compile_cache("flash")
    assert shared.plan("selftest", 2, ["--mode", "ok"], {}).key == before.key
