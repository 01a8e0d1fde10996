"""helpers.run.hosts: several hosts on one machine (network namespaces), torchrun across them."""

import os
import re
import subprocess
import sys
import time

import pytest

from helpers.run import hosts as hosts_mod
from helpers.run.hosts import Hosts, node_command, remove_stale
from helpers.run.launch import REPO_ROOT, rank_env

WHY_NOT = hosts_mod.namespaces_possible()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"no namespaces: {WHY_NOT}")


def _across(h: Hosts, nproc_per_node: int = 2) -> list[str]:
    """torchrun on every host, the selftest demo (an all-reduce of the ranks); each host's
    output."""
    extra = {"PYTHONPATH": str(REPO_ROOT)}
    if h.mode == "namespaces":
        extra["GLOO_SOCKET_IFNAME"] = "eth0"  # each host's one interface
    env = rank_env(h.n * nproc_per_node, extra)
    port = 29400 + os.getpid() % 500  # loopback agents of two pytest processes must not collide
    procs = [
        h.popen(k, node_command(h, k, "selftest", nproc_per_node, port=port), env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for k in range(h.n)
    ]  # fmt: skip
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * h.n, outs
    return outs


@needs_namespaces
def test_two_hosts_have_their_own_names_and_addresses_and_reach_only_each_other():
    server = "import socket; s = socket.create_server(('0.0.0.0', 5999)); c, _ = s.accept(); "
    server += "c.sendall(socket.gethostname().encode())"
    client = "import socket; print(socket.create_connection(('host0', 5999), 5).recv(64).decode())"
    with Hosts(2) as h:
        assert h.mode == "namespaces" and "host0 10.213.0.1, host1 10.213.0.2" in h.banner()
        assert [h.run(k, ["hostname"]).stdout.strip() for k in (0, 1)] == ["host0", "host1"]
        assert "10.213.0.2/24" in h.run(1, ["ip", "-br", "addr"]).stdout
        assert h.run(1, ["getent", "hosts", "host0"]).stdout.split() == ["10.213.0.1", "host0"]
        listening = h.popen(0, [sys.executable, "-c", server])
        time.sleep(1.0)
        got = h.run(1, [sys.executable, "-c", client], timeout_s=30)
        assert got.returncode == 0 and got.stdout.strip() == "host0", got.stderr
        listening.wait(timeout=10)
        # a host has no route but to the other hosts: nothing it sends can leave the switch
        routes = h.run(0, ["ip", "route"]).stdout.splitlines()
        assert routes and all(r.startswith("10.213.0.0/24 dev eth0") for r in routes), routes
        outside = "import socket; socket.create_connection(('192.0.2.1', 80), 2)"
        refused = h.run(0, [sys.executable, "-c", outside])
        assert refused.returncode != 0 and "Network is unreachable" in refused.stderr


@needs_namespaces
def test_torchrun_across_two_hosts_puts_two_ranks_on_each():
    with Hosts(2) as h:
        outs = _across(h)
    for k, out in enumerate(outs):
        ranks = sorted(int(r) for r in re.findall(r"rank (\d) of 4 up on gloo", out))
        assert ranks == [2 * k, 2 * k + 1], out
        assert out.count('"sum": 6.0') == 2  # 0 + 1 + 2 + 3, all-reduced over both hosts


def test_without_namespaces_the_agents_run_on_loopback_and_say_so():
    with Hosts(2, namespaces=False) as h:
        assert h.mode == "loopback" and {x.address for x in h.hosts} == {"127.0.0.1"}
        assert h.banner().startswith("network namespaces unavailable (asked for loopback)")
        outs = _across(h, nproc_per_node=1)
    assert [out.count('"sum": 1.0') for out in outs] == [1, 1]  # rank 0 + rank 1


@needs_namespaces
def test_hosts_and_their_processes_are_removed_even_when_the_block_fails():
    with pytest.raises(RuntimeError, match="on purpose"):
        with Hosts(2) as h:
            sleeper = h.popen(1, ["sleep", "600"])
            raise RuntimeError("failed on purpose")
    assert sleeper.wait(timeout=10) != 0  # killed, not finished
    assert not [n for n in hosts_mod._owned() if n.startswith(f"{hosts_mod.PREFIX}{os.getpid()}")]
    assert not list(hosts_mod.NETNS_ETC.glob(f"{hosts_mod.PREFIX}{os.getpid()}*"))


@needs_namespaces
def test_namespaces_of_a_process_that_died_are_removed_as_stale():
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no longer runs
    name = f"{hosts_mod.PREFIX}{dead.pid}h0"
    subprocess.run(["ip", "netns", "add", name], check=True)
    assert name in remove_stale() and name not in hosts_mod._owned()


def test_bad_host_counts_and_indices_are_refused():
    for n in (0, 201, 1.5, True):
        with pytest.raises(ValueError, match="number of hosts"):
            Hosts(n)
    with pytest.raises(IndexError, match="host 2 does not exist: there are 2"):
        Hosts(2, namespaces=False).command(2, ["true"])
