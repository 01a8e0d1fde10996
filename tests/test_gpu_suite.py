"""helpers.record.gpu_suite: the record of ``make test-gpu`` (one entry per GPU test and per
notebook)."""

import json
import subprocess
import sys

from helpers.record import gpu_suite
from helpers.record import results


def test_cells_aggregate_into_one_entry_per_notebook():
    lines = [
        {
            "nodeid": "notebooks/01_x.ipynb::Cell 0",
            "when": "call",
            "outcome": "passed",
            "seconds": 1.5,
            "reason": "",
        },
        {
            "nodeid": "notebooks/01_x.ipynb::Cell 1",
            "when": "call",
            "outcome": "failed",
            "seconds": 2.0,
            "reason": "NameError: one",
        },
        {
            "nodeid": "tests/test_a.py::test_b",
            "when": "setup",
            "outcome": "skipped",
            "seconds": 0.0,
            "reason": "needs at least two CUDA GPUs",
        },
        {
            "nodeid": "tests/test_a.py::test_c",
            "when": "call",
            "outcome": "passed",
            "seconds": 3.25,
            "reason": "",
        },
    ]
    entries = {e["name"]: e for e in gpu_suite.summarize(lines)}
    nb = entries["notebooks/01_x.ipynb"]
    assert (nb["outcome"], nb["cells"], nb["seconds"]) == ("failed", 2, 3.5)
    assert nb["failed"] == [{"item": "Cell 1", "reason": "NameError: one"}]
    assert entries["tests/test_a.py::test_b"]["reason"] == "needs at least two CUDA GPUs"
    assert gpu_suite.totals(list(entries.values())) == {
        "passed": 1,
        "failed": 1,
        "skipped": 1,
        "seconds": 6.8,
    }


def test_the_plugin_writes_a_record_test_by_test(tmp_path, monkeypatch):
    """A real pytest run with the plugin: the record exists and names each test's outcome."""
    (tmp_path / "test_demo.py").write_text(
        "import pytest\ndef test_ok():\n    assert 1\n"
        "@pytest.mark.skip(reason='needs 2 GPUs')\ndef test_skip():\n    pass\n"
    )
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path / "results")
    log = tmp_path / "log.jsonl"
    env_run = [
        sys.executable,
        "-m",
        "pytest",
        str(tmp_path / "test_demo.py"),
        "-p",
        "helpers.record.gpu_suite",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    subprocess.run(
        env_run,
        check=True,
        capture_output=True,
        env={**__import__("os").environ, gpu_suite.LOG_ENV: str(log)},
    )
    path = gpu_suite._save(log, ["python -m pytest demo"], copy_to=str(tmp_path / "out"))
    assert (tmp_path / "out" / path.parent.name / "test_gpu.json").exists()
    record = json.loads(path.read_text())
    outcomes = {e["name"].split("::")[-1]: e["outcome"] for e in record["runs"]}
    assert outcomes == {"test_ok": "passed", "test_skip": "skipped"}
    assert (
        record["totals"]["passed"] == 1
        and record["provenance"]["command"] == "python -m pytest demo"
    )
