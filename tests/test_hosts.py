"""helpers.cluster.hosts: hosts on one machine (network namespaces), torchrun across them."""

import re
import subprocess
import sys
import time

import pytest

from helpers.chapters import ch05_multinode
from helpers.cluster import hosts as hosts_mod
from helpers.parallel.mesh import RankMesh
from helpers.cluster.hosts import Hosts, remove_stale
from helpers.run.launch import LaunchError
from helpers.cluster.multinode import launch_nodes

WHY_NOT = hosts_mod.namespaces_possible()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"no namespaces: {WHY_NOT}")


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
        job = launch_nodes("selftest", h, 2)
    for k, out in enumerate(job.outputs):
        ranks = sorted(int(r) for r in re.findall(r"rank (\d) of 4 up on gloo", out))
        assert ranks == [2 * k, 2 * k + 1], out
    assert [r["sum"] for r in job.results] == [6.0] * 4  # 0 + 1 + 2 + 3 over both hosts


@needs_namespaces
def test_the_3d_layout_trains_across_two_hosts_like_the_unsplit_model():
    """Chapter 2's dp × pp × tp = 2 × 2 × 2 from scratch, 4 ranks on each of two hosts: the tensor
    and pipeline groups inside a host, the data groups across them (the run Chapter 5's notebook
    shows, made once per test run)."""
    run = ch05_multinode.result("torchrun_3d")
    assert run["source"] == "live"
    mesh = RankMesh(dp=2, pp=2, tp=2)
    assert sorted(r["rank"] for r in run["ranks"]) == list(range(8))
    host = {r["rank"]: r["host"] for r in run["ranks"]}
    assert sorted(host.values()) == ["host0"] * 4 + ["host1"] * 4
    for r in run["ranks"]:
        assert r["groups"] == {axis: mesh.group_of(r["rank"], axis) for axis in ("dp", "pp", "tp")}
        assert r["losses_equal_reference"] and r["max_grad_diff"] < 1e-5
        assert all(host[q] == host[r["rank"]] for q in r["groups"]["tp"] + r["groups"]["pp"])
        assert {host[q] for q in r["groups"]["dp"]} == {"host0", "host1"}
    assert all("--nnodes 2" in c and "--rdzv_endpoint 10.213.0.1:" in c for c in run["commands"])


def test_a_failing_agent_names_its_host():
    with Hosts(2, namespaces=False) as h, pytest.raises(LaunchError, match="the agent on "):
        launch_nodes("selftest", h, 1, ["--mode", "crash"], timeout_s=120)


@needs_namespaces
def test_hosts_and_their_processes_are_removed_even_when_the_block_fails():
    with pytest.raises(RuntimeError, match="on purpose"):
        with Hosts(2) as h:
            sleeper = h.popen(1, ["sleep", "600"])
            raise RuntimeError("failed on purpose")
    assert sleeper.wait(timeout=10) != 0  # killed, not finished
    mine = {x.netns for x in h.hosts} | {h.switch}  # book<pid>h0 is not book<pid>1h0's
    assert not mine & set(hosts_mod._owned())
    assert not [n for n in mine if (hosts_mod.NETNS_ETC / n).exists()]


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


@needs_namespaces
def test_a_shaped_link_is_slower_an_unplugged_one_silent_and_a_killed_host_empty():
    sink = "import socket; c, _ = socket.create_server(('0.0.0.0', 6001)).accept()\n"
    sink += "while c.recv(1 << 20): pass"
    send = "import socket, time; c = socket.create_connection(('host0', 6001), 5); t = time.time()"
    send += "\nfor _ in range(8): c.sendall(b'x' * (1 << 20))\nc.close(); print(time.time() - t)"
    with Hosts(2) as h:
        h.shape(1, "100mbit")
        listening = h.popen(0, [sys.executable, "-c", sink])
        time.sleep(0.5)
        seconds = float(h.run(1, [sys.executable, "-c", send], timeout_s=30).stdout)
        listening.wait(timeout=10)
        assert 8 * 8 / seconds < 130, f"{8 * 8 / seconds:.0f} Mbit/s through a 100 Mbit/s link"
        h.set_link(1, False)
        cut = h.run(1, [sys.executable, "-c", send], timeout_s=30)
        assert cut.returncode != 0  # no ARP answer: "No route to host", or a timeout
        assert "No route to host" in cut.stderr or "timed out" in cut.stderr, cut.stderr
        h.set_link(1, True)
        sleeper = h.popen(1, ["sleep", "600"])
        assert _within(5, lambda: sleeper.pid in h.processes(1))  # once nsenter has entered
        assert h.kill(1) >= 1 and sleeper.wait(timeout=10) == -9
        assert _within(5, lambda: h.processes(1) == [])  # torn down, not only signalled
    with pytest.raises(RuntimeError, match="needs the hosts in namespaces"):
        Hosts(1, namespaces=False).kill(0)


def _within(seconds: float, ok) -> bool:
    """Whether ``ok()`` holds within ``seconds`` (polled): a process enters or leaves a namespace
    a moment after the call that starts or kills it returns."""
    end = time.monotonic() + seconds
    while not ok():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True
