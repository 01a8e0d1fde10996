"""A SLURM cluster on one machine: Chapter 5, "Launching under SLURM".

    with Hosts(2) as hosts, SlurmCluster(hosts) as cluster:   # host0 head + compute, host1
        job = cluster.sbatch(script_path)                    # -> job id
        cluster.client(["squeue"])

The hosts are :class:`helpers.cluster.hosts.Hosts` in network namespaces. One ``munged`` with a
fresh key serves every host (they share this machine's files, so its socket is reachable from each);
``slurmctld`` runs on host0 like a head node, one ``slurmd`` per host, each under its own node
name, all reading one :func:`slurm_conf` through ``SLURM_CONF``. Client commands (``sbatch``,
``squeue``, ``scontrol``, ``sacct``) run on host0. There is no ``slurmdbd`` (it needs a
database): finished jobs are written by ``jobcomp/filetxt`` and ``sacct --completion`` reads them.
:func:`slurm_job` runs the book's job script (``helpers/configs/ch05_job.sbatch``) and returns what
happened. Leaving the ``with`` block stops every daemon and removes the temporary folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers.cluster.hosts import namespaces_possible, Hosts, Started
from helpers.run.launch import rank_env, QUIET_ENV, REPO_ROOT
from helpers.run.env import is_result, results_of

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol", "sacct")
JOB_SCRIPT = REPO_ROOT / "helpers" / "configs" / "ch05_job.sbatch"


def _which(program: str) -> str | None:
    return shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")


def slurm_missing() -> str | None:
    """None when a SLURM cluster can be made here, else why not (root, namespaces, programs)."""
    why = namespaces_possible()
    if why:
        return f"network namespaces unavailable ({why})"
    missing = [p for p in PROGRAMS if _which(p) is None]
    return f"not installed: {', '.join(missing)}" if missing else None


def slurm_conf(nodes: list[tuple[str, str]], folder: str, cpus: int, munge_socket: str) -> str:
    """The ``slurm.conf`` of a cluster whose head is the first of ``nodes`` (name, address), each
    with ``cpus`` CPUs, every file under ``folder``; the daemons authenticate through the
    ``munged`` at ``munge_socket``."""
    if not nodes:
        raise ValueError("a cluster needs at least one node")
    if isinstance(cpus, bool) or not isinstance(cpus, int) or cpus < 1:
        raise ValueError(f"cpus must be a positive integer, got {cpus!r}")
    names = [name for name, _ in nodes]
    if len(set(names)) != len(names):
        raise ValueError(f"node names must differ: {names}")
    for path in (folder, munge_socket):
        if not os.path.isabs(path):
            raise ValueError(f"SLURM needs absolute paths, got {path!r}")
    head, head_addr = nodes[0]
    lines = [
        "# Chapter 5, 'Launching under SLURM': a cluster of network namespaces on one machine",
        "ClusterName=book",
        f"SlurmctldHost={head}({head_addr})",
        "SlurmUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={folder}/state",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        f"SlurmdSpoolDir={folder}/spool/%n",  # %n: the node's name, so every slurmd has its own
        f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmdLogFile={folder}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",  # no cgroups: the hosts share this machine's
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",  # slurmdbd would need a database
        "JobCompType=jobcomp/filetxt",  # one line per finished job: sacct --completion
        f"JobCompLoc={folder}/jobcomp.txt",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=300",
        *(f"NodeName={n} NodeAddr={a} CPUs={cpus} State=UNKNOWN" for n, a in nodes),
        "PartitionName=book Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


class SlurmError(RuntimeError):
    """The cluster did not come up, or a client command failed; the message carries the daemons'
    own last log lines."""


class SlurmCluster(Started):
    """munged, slurmctld on host0 and one slurmd per host, for the life of a ``with`` block."""

    def __init__(self, hosts: Hosts, cpus: int | None = None, start_timeout_s: float = 30.0):
        if not isinstance(hosts, Hosts):
            raise TypeError(f"SlurmCluster needs a Hosts, got {type(hosts).__name__}")
        hosts._needs_namespaces("a SLURM cluster")
        self.hosts = hosts
        self.cpus = cpus or os.cpu_count() or 1
        self.start_timeout_s = start_timeout_s
        self.folder: Path | None = None
        self.conf = ""
        self._daemons: list[tuple[str, subprocess.Popen]] = []  # (name on its host, process)
        self.seconds_to_idle: float | None = None

    # -- starting and stopping ----------------------------------------------------------------
    def _start(self) -> None:
        start = time.monotonic()
        self.folder = Path(tempfile.mkdtemp(prefix="book-slurm-"))
        os.chmod(self.folder, 0o755)  # slurmstepd reads the job script from the spool under it
        f = self.folder
        for sub in ("state", "spool", "munge"):  # munged wants its socket's folder 0755
            (f / sub).mkdir(mode=0o755)
        key = f / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        socket = f / "munge" / "munge.socket"
        nodes = [(h.name, h.address) for h in self.hosts.hosts]
        self.conf = slurm_conf(nodes, str(f), self.cpus, str(socket))
        (f / "slurm.conf").write_text(self.conf)
        self._daemon(0, ["munged", "-F", f"--key-file={key}", f"--socket={socket}",
                         f"--pid-file={f}/munge/munged.pid", f"--log-file={f}/munged.log",
                         f"--seed-file={f}/munge/munged.seed"])  # fmt: skip
        self._wait(socket.exists, "munged made no socket")
        self._daemon(0, ["slurmctld", "-D", "-i"])
        for h in self.hosts.hosts:
            self._daemon(h.index, ["slurmd", "-D", "-N", h.name])
        self._wait(self._all_idle, "the nodes did not all become idle")
        self.seconds_to_idle = time.monotonic() - start

    def _daemon(self, k: int, cmd: list[str]) -> None:
        name = f"{cmd[0]} on {self.hosts.hosts[k].name}"
        log = open(self.folder / f"{name.replace(' on ', '-')}.out", "w")
        cmd = [_which(cmd[0]) or cmd[0], *cmd[1:]]
        p = self.hosts.popen(k, cmd, env=self.env(), stdout=log, stderr=subprocess.STDOUT)
        self._daemons.append((name, p))
        log.close()

    def _all_idle(self) -> bool:
        done = self.client(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return len(states) == self.hosts.n and set(states.values()) == {"idle"}

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while not ready():
            for name, p in self._daemons:
                if p.poll() is not None:
                    raise SlurmError(f"{name} exited with {p.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise SlurmError(f"{what} within {self.start_timeout_s:g} s\n{self.logs()}")
            time.sleep(0.2)

    def close(self) -> None:
        """Stop every daemon (SIGTERM, then SIGKILL) and remove the folder (idempotent)."""
        for _, p in reversed(self._daemons):
            if p.poll() is None:
                p.terminate()
        for _, p in reversed(self._daemons):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._daemons.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    # -- using it -----------------------------------------------------------------------------
    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of daemons and clients: this process's, with ``SLURM_CONF``."""
        return {**os.environ, "SLURM_CONF": str(self.folder / "slurm.conf"), **(extra or {})}

    def client(self, cmd: list[str], check: bool = True, timeout_s: float = 30, env=None):
        """Run a client command on host0 (the head); raise :class:`SlurmError` when it fails
        and ``check``."""
        done = self.hosts.run(0, cmd, timeout_s=timeout_s, env=env or self.env())
        if check and done.returncode != 0:
            raise SlurmError(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stderr}")
        return done

    def logs(self, last: int = 15) -> str:
        """The last lines every daemon printed (in the foreground it prints its log), each under
        its name and host."""
        if self.folder is None:
            return ""
        parts = []
        for name, p in self._daemons:
            path = self.folder / f"{name.replace(' on ', '-')}.out"
            lines = path.read_text(errors="replace").splitlines()[-last:] if path.exists() else []
            parts.append(f"--- {name} ({'running' if p.poll() is None else p.returncode})\n"
                         + "\n".join(lines))  # fmt: skip
        return "\n".join(parts)


# -- the book's job --------------------------------------------------------------------------------
def slurm_job(script: Path = JOB_SCRIPT, timeout_s: float = 90.0, poll_s: float = 0.25) -> dict:
    """Chapter 5's SLURM run: a 2-node cluster, ``sbatch`` of the book's job script, ``squeue``
    polled while it runs, its output file and ``sacct --completion`` after it; every rank's
    result of both launches, (a) ``launch_from_slurm`` and (b) torchrun, and the seconds taken.
    The cluster's temporary folder reads ``FOLDER`` in the texts returned."""
    start = time.monotonic()
    with Hosts(2) as hosts, SlurmCluster(hosts) as cluster:
        folder = str(cluster.folder)
        out = cluster.folder / "job"
        out.mkdir(mode=0o755)
        path = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"  # this Python
        extra = {**QUIET_ENV, "PYTHONPATH": str(REPO_ROOT), "PATH": path}
        env = cluster.env(rank_env(4, extra))
        sbatch = ["sbatch", "--parsable", f"--chdir={REPO_ROOT}", f"--output={out}/ch05-%j.out"]
        job = cluster.client([*sbatch, str(script)], env=env).stdout.strip().split(";")[0]
        submitted = time.monotonic()
        seen: list[dict] = []  # what squeue showed, each time the job's state or nodes changed
        queue = ["squeue", "-j", job, "-o", "%.5i %.9P %.6j %.8T %.6M %.3D %R"]
        while True:
            lines = cluster.client(queue, check=False).stdout.splitlines()
            if len(lines) < 2:  # only the header: the job has left the queue
                break
            state = [lines[1].split()[3], lines[1].split()[-1]]  # STATE, NODELIST(REASON)
            if not seen or seen[-1]["state"] != state:
                seen.append({"s": time.monotonic() - submitted, "state": state, "lines": lines})
            if time.monotonic() - submitted > timeout_s:
                cluster.client(["scancel", job], check=False)
                text = "\n".join(_read(out / f"ch05-{job}.out")[-30:])
                raise SlurmError(f"job {job} ran past {timeout_s:g} s\n{text}\n{cluster.logs()}")
            time.sleep(poll_s)
        job_s = time.monotonic() - submitted
        state = cluster.client(["scontrol", "show", "job", job], check=False).stdout
        fmt = "JobID,JobName,Partition,State,ExitCode,NNodes,NodeList,Start,End,Elapsed"
        sacct = cluster.client(["sacct", "--completion", "-j", job, f"--format={fmt}"]).stdout
        output = _read(out / f"ch05-{job}.out")
        fields = dict(f.split("=", 1) for f in state.split() if "=" in f)
        if fields.get("JobState") != "COMPLETED":
            raise SlurmError(f"job {job}: {fields.get('JobState')}\n" + "\n".join(output[-30:]))
        banner, cluster_s = hosts.banner(), cluster.seconds_to_idle
        conf = cluster.conf.replace(folder, "FOLDER")
    marker = next(i for i, line in enumerate(output) if line.startswith("== (b)"))
    runs = {"slurm": results_of(output[:marker]), "torchrun": results_of(output[marker:])}
    return {
        "hosts_banner": banner,
        "slurm_conf": conf,
        "job_script": script.read_text(),
        "sbatch": " ".join([*sbatch, str(script.relative_to(REPO_ROOT))]).replace(folder, "FOLDER"),
        "job_id": job,
        "squeue": seen,
        "sacct": sacct.splitlines(),
        "state": {k: fields.get(k) for k in ("JobState", "ExitCode", "NodeList", "NumTasks")},
        "output": [line for line in output if not is_result(line)],
        "runs": {via: sorted(r, key=lambda x: x["rank"]) for via, r in runs.items()},
        "seconds": {"cluster_up": cluster_s, "job": job_s, "total": time.monotonic() - start},
    }


def _read(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines() if path.exists() else []
