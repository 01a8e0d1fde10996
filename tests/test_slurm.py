"""helpers.cluster.slurm: a 2-node SLURM cluster in namespaces runs Chapter 5's job script."""

import re

import pytest

from helpers.cluster.hosts import Hosts
from helpers.run.shared import once
from helpers.cluster.slurm import JOB_SCRIPT, SlurmCluster, slurm_conf, slurm_job, slurm_missing

WHY_NOT = slurm_missing()
needs_slurm = pytest.mark.skipif(WHY_NOT is not None, reason=f"no SLURM cluster: {WHY_NOT}")
NODES = [("host0", "10.213.0.1"), ("host1", "10.213.0.2")]


def test_the_conf_names_every_node_by_address_and_gives_each_slurmd_its_own_files():
    conf = slurm_conf(NODES, "/srv/slurm", 4, "/srv/slurm/munge/munge.socket")
    lines = conf.splitlines()
    assert "SlurmctldHost=host0(10.213.0.1)" in lines
    assert "NodeName=host1 NodeAddr=10.213.0.2 CPUs=4 State=UNKNOWN" in lines
    assert "AuthInfo=socket=/srv/slurm/munge/munge.socket" in lines
    assert {"SlurmdSpoolDir=/srv/slurm/spool/%n", "SlurmdPidFile=/srv/slurm/slurmd-%n.pid"} < set(
        lines
    )
    assert "JobCompType=jobcomp/filetxt" in lines and "ProctrackType=proctrack/linuxproc" in lines
    assert all(re.fullmatch(r"#.*|\w+=.*", line) for line in lines), conf


@pytest.mark.parametrize(
    "nodes, folder, cpus, socket, message",
    [
        ([], "/f", 2, "/f/s", "at least one node"),
        ([("a", "1.1.1.1"), ("a", "1.1.1.2")], "/f", 2, "/f/s", "names must differ"),
        (NODES, "f", 2, "/f/s", "absolute paths"),
        (NODES, "/f", 2, "s", "absolute paths"),
        (NODES, "/f", 0, "/f/s", "positive integer"),
        (NODES, "/f", True, "/f/s", "positive integer"),
    ],
)
def test_a_bad_conf_request_says_what_is_wrong(nodes, folder, cpus, socket, message):
    with pytest.raises(ValueError, match=message):
        slurm_conf(nodes, folder, cpus, socket)


def test_a_cluster_needs_hosts_in_namespaces():
    with pytest.raises(TypeError, match="needs a Hosts"):
        SlurmCluster(["host0"])
    with Hosts(2, namespaces=False) as loopback:
        with pytest.raises(RuntimeError, match="needs the hosts in namespaces"):
            SlurmCluster(loopback)


def test_the_job_script_asks_for_two_nodes_and_launches_twice():
    text = JOB_SCRIPT.read_text()
    assert "#SBATCH --nodes=2" in text and "#SBATCH --ntasks-per-node=2" in text
    assert "--via slurm" in text and "--via torchrun" in text
    assert text.count("\nsrun ") == 2


@needs_slurm
def test_sbatch_runs_four_ranks_on_two_nodes_through_slurm_and_through_torchrun():
    job = once("multinode:slurm", slurm_job)
    assert job["state"] == {
        "JobState": "COMPLETED",
        "ExitCode": "0:0",
        "NodeList": "host[0-1]",
        "NumTasks": "4",
    }
    assert ["RUNNING", "host[0-1]"] in [seen["state"] for seen in job["squeue"]]
    done = [line.split() for line in job["sacct"] if line.split()[:1] == [job["job_id"]]]
    assert done and {"COMPLETED", "0:0", "2", "host[0-1]"} <= set(done[0]), job["sacct"]
    # (a) srun started 4 tasks and every task was a rank: rank = SLURM_PROCID, 2 per node
    via_slurm = job["runs"]["slurm"]
    assert [r["rank"] for r in via_slurm] == [0, 1, 2, 3]
    for r in via_slurm:
        assert r["world_size"] == 4 and r["sum"] == 6.0 and r["backend"] == "gloo"
        assert r["host"] == f"host{r['rank'] // 2}"
        assert r["env"]["SLURM_PROCID"] == str(r["rank"]) and r["env"]["SLURM_NPROCS"] == "4"
        assert r["env"]["RANK"] is None  # nothing but SLURM told it who it is
    # (b) srun started 1 torchrun agent per node (2 tasks) and each agent 2 ranks
    via_torchrun = job["runs"]["torchrun"]
    assert [r["rank"] for r in via_torchrun] == [0, 1, 2, 3]
    by_host: dict[str, list[int]] = {}
    for r in via_torchrun:
        assert r["world_size"] == 4 and r["sum"] == 6.0 and r["env"]["SLURM_NPROCS"] == "2"
        assert r["env"]["RANK"] == str(r["rank"]) and r["env"]["MASTER_ADDR"] == "host0"
        by_host.setdefault(r["host"], []).append(r["rank"])
    assert sorted(by_host) == ["host0", "host1"] and all(len(v) == 2 for v in by_host.values())
    assert job["output"][-1] == "== done" and "FOLDER" in job["slurm_conf"]
