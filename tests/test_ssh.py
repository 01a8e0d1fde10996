"""helpers.cluster.ssh: ``colossalai run --hostfile`` over real SSH between two hosts (Ch. 5)."""

import os
import re

import pytest

from helpers.cluster import ssh
from helpers.cluster.hosts import Hosts
from helpers.chapters import ch05_multinode

WHY_NOT = ssh.ssh_missing()
needs_sshd = pytest.mark.skipif(WHY_NOT is not None, reason=f"no sshd between hosts: {WHY_NOT}")
COMMAND = "colossalai run --hostfile hostfile --nproc_per_node 2 -m helpers.demos.ch05_hostfile"


@pytest.fixture(scope="module")
def runs():
    return ch05_multinode.result("hostfile")["scenarios"]  # the runs Chapter 5's notebook shows


def _torchrun(node: int, master: str = "host0") -> str:
    return (
        f"torchrun --nproc_per_node=2 --nnodes=2 --node_rank={node} --master_addr={master} "
        "--master_port=29500 -m helpers.demos.ch05_hostfile --timeout_s "
    )


def _ran_on_both_hosts(run: dict) -> None:
    assert run["returncode"] == 0 and not run["timed_out"], run["lines"][-30:]
    assert run["hostfile"] == "host0\nhost1\n" and run["launched_from"] == "host0"
    assert [t.startswith(_torchrun(k)) for k, t in enumerate(run["torchrun"])] == [True, True]
    assert run["ranks"] == {"host0": [0, 1], "host1": [2, 3]}
    assert [(r["rank"], r["host"], r["sum"]) for r in run["results"]] == [
        (0, "host0", 6.0),
        (1, "host0", 6.0),
        (2, "host1", 6.0),
        (3, "host1", 6.0),
    ]  # 0 + 1 + 2 + 3 all-reduced over both hosts
    assert run["evidence"][-2:] == ["host0: success", "host1: success"]


@needs_sshd
def test_the_readers_hostfile_command_runs_two_ranks_on_each_host(runs):
    run = runs["works"]
    assert run["command"] == COMMAND + " --timeout_s 60"
    _ran_on_both_hosts(run)
    assert {r["resolves"] for r in run["results"]} == {"10.213.0.1", "10.213.0.2"}


@needs_sshd
def test_debian_127_0_1_1_lines_make_gloo_dial_loopback_and_the_launch_fails_by_its_timeout(runs):
    run = runs["loopback_hang"]
    # ended on its own (the ranks' 3 s process-group timeout), not killed by the launcher's bound
    assert run["returncode"] == 1 and not run["timed_out"] and run["results"] == []
    assert run["ranks"] == {"host0": [0, 1], "host1": [2, 3]}  # every rank started
    assert {"host0 resolves to 127.0.1.1", "host1 resolves to 127.0.1.1"} <= set(run["evidence"])
    assert any(
        re.search(r"connectFullMesh failed.*remote=\[127\.0\.1\.1\]", e) for e in run["evidence"]
    )
    assert run["cause"].startswith("loopback") and "host0: failure" in run["evidence"]


@needs_sshd
def test_exporting_gloo_socket_ifname_fixes_the_launch_on_the_same_hosts(runs):
    run = runs["loopback_fix"]
    assert run["env"] == {"GLOO_SOCKET_IFNAME": "eth0"} and run["debian_etc_hosts"]
    _ran_on_both_hosts(run)
    # the hosts still resolve their names to loopback; colossalai exported the variable to both
    assert {(r["resolves"], r["ifname"]) for r in run["results"]} == {("127.0.1.1", "eth0")}


@needs_sshd
def test_ssh_reaches_the_other_host_without_prompt_and_bad_hostfiles_are_refused():
    with Hosts(2) as h, ssh.SshHosts(h) as s:
        home, daemons = s.home, list(s.daemons)
        env = {"HOME": str(home), "PATH": os.environ["PATH"]}
        got = h.run(
            0, ["ssh", "-F", str(home / ".ssh/config"), "host1", "hostname"], env=env, timeout_s=30
        )
        assert (got.returncode, got.stdout.strip()) == (0, "host1"), got.stderr
        for hostfile, message in (
            (["host0", "host7"], "names 'host7', which host0 cannot resolve"),
            (["host0", "host0"], "names a host twice"),
            ([], "names no host"),
            (["localhost", "host1"], "first host 'localhost' becomes every node's --master_addr"),
        ):
            with pytest.raises(ValueError, match=re.escape(message)):
                ssh.hostfile_launch(s, hostfile=hostfile)
        with pytest.raises(IndexError, match="host 2 does not exist"):
            ssh.hostfile_launch(s, launch_from=2)
    assert not home.exists() and all(p.poll() is not None for p in daemons)


def test_ssh_needs_namespaced_hosts_and_a_known_scenario():
    with pytest.raises(RuntimeError, match="needs them in namespaces"):
        ssh.SshHosts(Hosts(2, namespaces=False))
    with pytest.raises(ValueError, match="no scenario 'nope'"):
        ssh.scenario("nope")
    assert ssh.reader_command(8, "helpers.demos.ch05_train", ["--config", "run.yaml"]) == [
        "colossalai", "run", "--hostfile", "hostfile", "--nproc_per_node", "8",
        "-m", "helpers.demos.ch05_train", "--config", "run.yaml",
    ]  # fmt: skip
