"""helpers.run.launch: the launcher's own arguments are checked before anything starts.

``torchrun`` takes ``--nproc_per_node=2.5`` as written and fails only after starting; a string
``"2"`` met ``nproc < 1`` as a raw TypeError; ``timeout_s=-5`` started the ranks and reported
them "past its -5 s timeout"; a string ``args`` was split into characters. Each is now a
ValueError that names the argument, the value and what is allowed, raised before a process or a
shared-run plan exists.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers.run import launch as launcher
from helpers.run.launch import LaunchResult, launch, rank_env, torchrun_command


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch):
    """Any attempt to start a process or plan a shared run fails the test."""

    def started(*args, **kwargs):
        raise AssertionError("a process was started")

    monkeypatch.setattr(launcher.subprocess, "Popen", started)
    monkeypatch.setattr(launcher.shared, "plan", started)


@pytest.mark.parametrize(
    "nproc, says",
    [
        (2.5, "nproc must be a whole number, at least 1 (ranks on this machine), got 2.5 (a fl"),
        ("2", "got '2' (a str); e.g. nproc=2"),
        (0, "nproc must be at least 1 (ranks on this machine), got 0"),
        (-4, "got -4"),
        (True, "got True (a bool)"),
        (None, "got None (a NoneType)"),
        (2.0, "got 2.0 (a float)"),
    ],
)  # fmt: skip
def test_nproc_must_be_a_whole_number_of_ranks(nproc, says):
    with pytest.raises(ValueError) as info:
        launch("selftest", nproc=nproc)
    assert says in str(info.value)
    with pytest.raises(ValueError, match="nproc must be"):
        torchrun_command("selftest", nproc)
    with pytest.raises(ValueError, match="nproc must be"):
        rank_env(nproc)


@pytest.mark.parametrize("timeout", [-5, 0, math.nan, math.inf, -math.inf, "60", True, None])
def test_timeout_must_be_a_finite_positive_time(timeout):
    with pytest.raises(ValueError) as info:
        launch("selftest", nproc=2, timeout_s=timeout)
    msg = str(info.value)
    assert (
        msg.startswith("timeout_s must be a finite number of seconds > 0, got ") and "e.g." in msg
    )


@pytest.mark.parametrize(
    "kwargs, says",
    [
        ({"args": "--steps 3"}, "args must be a list (a str would be split into characters)"),
        ({"args": None}, "args must be a list"),
        ({"args": b"--x"}, "args must be a list"),
        ({"env": {"X": 1}}, "env must be a dict of str to str, got {'X': 1}"),
        ({"env": "X=1"}, "env must be a dict of str to str"),
        ({"demo": "ch01_dpp"}, "no module helpers.demos.ch01_dpp; did you mean"),
        ({"demo": "helpers.no_such_package.x"}, "no module helpers.no_such_package.x"),
        ({"demo": ""}, "demo must be a demo's name"),
        ({"demo": 5}, "got 5 (an int)"),
    ],
)
def test_args_env_and_demo_are_checked(kwargs, says):
    with pytest.raises(ValueError) as info:
        launch(**{"demo": "selftest", "nproc": 2, **kwargs})
    assert says in str(info.value), str(info.value)


def test_log_dir_must_be_a_folder(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="log_dir must be a folder, got .*, which is a file"):
        torchrun_command("selftest", 2, log_dir=str(tmp_path / "file"))
    with pytest.raises(ValueError, match="log_dir must be a folder"):
        torchrun_command("selftest", 2, log_dir=5)
    cmd = torchrun_command("selftest", np.int64(2), log_dir=tmp_path / "logs")
    assert "--nproc_per_node=2" in cmd and f"--log-dir={tmp_path / 'logs'}" in cmd


def test_a_rank_is_a_whole_number():
    result = LaunchResult("selftest", 2, 1.0, [{"rank": 0, "x": 1}], {})
    assert result.first(0) == {"rank": 0, "x": 1}
    for r in ("0", 0.0, -1):
        with pytest.raises(ValueError, match="r must be"):
            result.rank(r)


def test_the_training_entry_point_refuses_a_log_interval_below_one(capsys):
    """``step % log_interval`` would divide by zero in every rank."""
    from helpers.train.run_config import parser

    for bad in ("0", "-2"):
        with pytest.raises(SystemExit):
            parser().parse_args(["--config", "c.yaml", "--log_interval", bad])
        assert "--log_interval: must be a whole number ≥ 1" in capsys.readouterr().err
    assert parser().parse_args(["--config", "c.yaml", "--log_interval", "3"]).log_interval == 3
