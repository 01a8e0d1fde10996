"""Node faults across two namespace hosts (helpers.cluster.node_faults): a host dies, a link goes
down, an elastic restart brings the host back and ends with the uninterrupted run's weights."""

import pytest

from helpers.cluster import hosts as hosts_mod
from helpers.chapters import ch05_multinode

WHY_NOT = hosts_mod.namespaces_possible()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"no namespaces: {WHY_NOT}")


@needs_namespaces
def test_a_host_that_dies_ends_the_job_and_is_named_by_the_survivors_log():
    r = ch05_multinode.result("lost_node")
    assert r["seconds_to_end"] is not None and r["seconds_to_end"] < r["bound_s"], r
    assert r["left"] == [[], []] and r["exit_codes"][0] != 0
    assert r["diagnosis"]["kind"] == "lost_node"
    assert "host1 (10.213.0.2)" in r["diagnosis"]["cause"]


@needs_namespaces
def test_a_link_down_times_out_across_nodes_and_everything_ends():
    r = ch05_multinode.result("link_down")
    assert r["host0_seconds_to_end"] is not None and r["host0_seconds_to_end"] < r["bound_s"], r
    assert r["host0_seconds_to_end"] >= r["timeout_s"]  # the collective timeout ended it
    assert r["host1_seconds_after_replug"] is not None, r
    assert r["left"] == [[], []]
    assert r["diagnosis"][0]["kind"] == "cross_node_timeout", r["diagnosis"]
    assert "waiting for host1" in r["diagnosis"][0]["cause"]


@needs_namespaces
def test_an_elastic_restart_resumes_and_ends_with_the_uninterrupted_weights():
    r = ch05_multinode.result("elastic_restart")
    assert r["exit_codes"] == [0, 0] and r["left"] == [[], []], r
    assert r["result"]["restart_count"] == 1 and 0 < r["result"]["resumed_from"] <= r["at_step"]
    assert r["result"]["weights_sha256"] == r["reference_sha256"]  # bit for bit, on the CPU
    assert r["seconds_to_end"] < r["bound_s"]


def test_the_reference_runs_with_the_callers_cpu_kernels(monkeypatch):
    """The ranks inherit the caller's environment; the one-process reference must too, or under
    ``ATEN_CPU_CAPABILITY=default`` the two pick different kernels and their hashes differ."""
    from helpers.cluster import node_faults

    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    seen = {}

    def fake_run(cmd, **kw):
        seen.update(kw["env"])
        return type("Done", (), {"returncode": 0, "stdout": "reference: abc", "stderr": ""})()

    monkeypatch.setattr(node_faults.subprocess, "run", fake_run)
    assert node_faults.reference_hash(4) == "abc"
    assert seen["ATEN_CPU_CAPABILITY"] == "default" and seen["PYTHONPATH"]


def test_the_survivor_sees_its_partner_gone_in_every_wording_of_gloo():
    """Which error the survivor's rank prints depends on where the kill finds its partner."""
    import re

    from helpers.cluster.node_faults import PARTNER_GONE

    seen = [
        "RuntimeError: [pair.cc:537] Read error [10.213.0.2]:27283: Connection reset by peer.",
        "RuntimeError: [pair.cc:553] Connection closed by peer [10.213.0.2]:61234",
        "RuntimeError: [gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 5000ms for recv",
    ]
    assert all(re.search(PARTNER_GONE, line) for line in seen)
    assert not re.search(PARTNER_GONE, "step 7 done")
