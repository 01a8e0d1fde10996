"""make test changes nothing on a reader's machine without asking (helpers/run/system_packages.py):
the decision, the install that starts no service, and, where an install happened here, the
machine's own namespace afterwards."""

import json
import shutil
import subprocess

import pytest

from helpers.run import system_packages as sp


def test_a_personal_machine_gets_nothing_without_asking(monkeypatch, capsys):
    monkeypatch.setattr(sp, "missing", lambda: ["openssh-server"])
    monkeypatch.setattr(sp, "install", lambda need: pytest.fail("installed without asking"))
    for euid, systemd, why in ((1000, False, "sudo"), (0, True, "systemd")):
        monkeypatch.setattr(sp.os, "geteuid", lambda e=euid: e)
        monkeypatch.setattr(sp, "systemd_running", lambda s=systemd: s)
        assert why in sp.personal_machine()
        assert sp.main(["auto"]) == 0
        out = capsys.readouterr().out
        assert "not installing openssh-server" in out and "make system-packages" in out


def test_a_container_as_root_installs(monkeypatch, tmp_path):
    monkeypatch.setattr(sp, "missing", lambda: ["munge"])
    monkeypatch.setattr(sp.os, "geteuid", lambda: 0)
    monkeypatch.setattr(sp, "systemd_running", lambda: False)
    monkeypatch.setattr(sp, "RECORD", tmp_path / "record.json")
    done = {"installed": ["munge"], "units_restored": [], "seconds": 0.1, "remove_with": "x"}
    monkeypatch.setattr(sp, "install", lambda need: done)
    assert sp.personal_machine() is None and sp.main(["auto"]) == 0
    assert json.loads((tmp_path / "record.json").read_text())["installed"] == ["munge"]


def _fake_machine(monkeypatch, tmp_path, policy_there: bool, after: dict):
    """subprocess.run recorded; policy-rc.d in tmp_path; unit states before and after."""
    calls = []
    policy = tmp_path / "policy-rc.d"
    if policy_there:
        policy.write_text("#!/bin/sh\nexit 0\n")
    monkeypatch.setattr(sp, "POLICY", policy)

    def run(cmd, **kw):
        calls.append((cmd, policy.exists()))
        if cmd[:2] == ["sh", "-c"]:
            policy.write_text(kw["input"])
        if cmd[:2] == ["rm", "-f"]:
            policy.unlink()
        return subprocess.CompletedProcess(cmd, 0, "", "")

    states = iter([{}, after])
    monkeypatch.setattr(sp.subprocess, "run", run)
    monkeypatch.setattr(sp, "unit_states", lambda: next(states))
    monkeypatch.setattr(sp.os, "geteuid", lambda: 0)
    return calls, policy


def test_the_install_starts_no_service_and_restores_the_machine(monkeypatch, tmp_path):
    after = {"ssh.service": {"is-enabled": "enabled", "is-active": "active"}}
    calls, policy = _fake_machine(monkeypatch, tmp_path, False, after)
    done = sp.install(["openssh-server"])
    apt = [held for cmd, held in calls if "install" in cmd]
    assert apt == [True]  # policy-rc.d answered 101 while apt-get ran
    assert not policy.exists()  # and was removed: it was not there before
    assert done["units_restored"] == ["ssh.service disabled", "ssh.service stopped"]
    assert ["systemctl", "disable", "ssh.service"] in [cmd for cmd, _ in calls]


def test_a_policy_already_there_is_left_alone(monkeypatch, tmp_path):
    calls, policy = _fake_machine(monkeypatch, tmp_path, True, {})
    sp.install(["munge"])
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"
    assert not any(cmd[:2] in (["sh", "-c"], ["rm", "-f"]) for cmd, _ in calls)


@pytest.mark.skipif(not sp.RECORD.is_file(), reason="no system packages were installed here")
def test_after_the_install_nothing_listens_and_nothing_is_enabled():
    """The machine's own namespace after this checkout's install: no sshd on port 22 (unless the
    machine had one before: then the record says ssh was enabled), no unit it enabled."""
    record = json.loads(sp.RECORD.read_text())
    if "openssh-server" in record["installed"] and shutil.which("ss"):
        listening = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
        assert not [line for line in listening.splitlines() if line.split()[3].endswith(":22")]
    for unit, state in sp.unit_states().items():
        was = record["units_before"].get(unit, {})
        if was.get("is-enabled") != "enabled":
            assert state["is-enabled"] != "enabled", unit
