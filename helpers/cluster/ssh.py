"""``colossalai run --hostfile`` over real SSH between hosts on one machine.

Chapter 5, "`colossalai run` and hostfiles". ``colossalai run`` (Colossal-AI 0.5.0,
``colossalai/cli/launcher``) reads the hostfile on the launching machine, reaches every other host
over fabric/paramiko SSH and runs there, in the launching directory and with the whole environment
exported, ``torchrun --nproc_per_node=N --nnodes=H --node_rank=K --master_addr=<first host> ...``.
:class:`SshHosts` starts ``/usr/sbin/sshd`` in every host of a :class:`helpers.cluster.hosts.Hosts`
(port 22 of its own address, keys made for the run) and a client ``HOME`` whose ``.ssh`` holds
key, ``config`` and ``known_hosts``, where paramiko and fabric look: no prompt, and the machine's
own SSH (``~/.ssh``, ``/etc/ssh``, its port 22) untouched. :func:`hostfile_launch` runs the
reader's command; :func:`scenarios` runs the chapter's :data:`SCENARIOS` at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers.run.env import placement_env, results_of
from helpers.cluster.hosts import NETNS_ETC, Hosts, Started, namespaces_possible
from helpers.run.launch import REPO_ROOT

SSHD = "/usr/sbin/sshd"
BIN = Path(sys.executable).parent  # colossalai and torchrun: started by name on every host
# colossalai exports the environment as ``export K="V" ...`` (multinode_runner.py:22): a value
# holding one of these would be read by the remote shell, so such variables stay behind
_UNSAFE = re.compile(r'["$`\\\n]')


def ssh_missing() -> str | None:
    """None when sshd can run in namespaced hosts here, else why not."""
    tools = (SSHD, shutil.which("ssh-keygen") or "ssh-keygen", str(BIN / "colossalai"))
    return next((f"{t} is missing" for t in tools if not os.path.exists(t)), namespaces_possible())


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)  # fmt: skip
    return path.with_suffix(".pub").read_text().strip()


class SshHosts(Started):
    """An SSH daemon on every host of ``hosts`` and a client ``HOME`` that reaches them all."""

    def __init__(self, hosts: Hosts):
        if hosts.mode != "namespaces":
            raise RuntimeError(f"SSH between hosts needs them in namespaces ({hosts.why_loopback})")
        self.hosts, self.dir, self.daemons = hosts, None, []

    def _start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="book-ssh-"))
        self.home = self.dir / "home"
        dot = self.home / ".ssh"
        dot.mkdir(parents=True, mode=0o700)
        (self.dir / "authorized_keys").write_text(_keygen(dot / "id_ed25519", "book") + "\n")
        known = []
        for h in self.hosts.hosts:
            d = self.dir / h.name
            (d / "run" / "sshd").mkdir(parents=True, mode=0o755)
            known.append(f"{h.name},{h.address} {_keygen(d / 'host_key', h.name)}\n")
            (d / "sshd_config").write_text(
                f"ListenAddress {h.address}:22\nHostKey {d / 'host_key'}\nPidFile none\n"
                f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\nUsePAM no\nStrictModes no\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nLogLevel ERROR\n"
            )
        (dot / "known_hosts").write_text("".join(known))
        (dot / "config").write_text(
            f"Host {' '.join(h.name for h in self.hosts.hosts)}\n  User root\n"
            f"  IdentityFile {dot / 'id_ed25519'}\n  UserKnownHostsFile {dot / 'known_hosts'}\n"
            "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 5\n"
        )
        # fabric's user config: echo each command it runs, so each node's torchrun line is seen
        (self.home / ".fabric.yaml").write_text("run:\n  echo: true\n")
        for h in self.hosts.hosts:
            d = self.dir / h.name  # /run/sshd (privilege separation) only in this host's mounts
            start = f"mount --bind {d / 'run'} /run && exec {SSHD} -D -e -f {d / 'sshd_config'}"
            self.daemons.append(self.hosts.popen(h.index, ["sh", "-c", start], text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))  # fmt: skip
        for h in self.hosts.hosts:
            self._wait_listening(h.index)

    def _wait_listening(self, k: int, timeout_s: float = 10.0) -> None:
        h, end = self.hosts.hosts[k], time.monotonic() + timeout_s
        probe = f"import socket; socket.create_connection(('{h.address}', 22), 1).close()"
        while time.monotonic() < end:
            if self.daemons[k].poll() is not None:
                raise RuntimeError(f"sshd on {h.name} exited: {self.daemons[k].stderr.read()}")
            if self.hosts.run(k, ["python3", "-c", probe], timeout_s=5).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"sshd on {h.name} did not listen on {h.address}:22 in {timeout_s} s")

    def close(self) -> None:
        """Stop every daemon and remove keys, configs and HOME (idempotent)."""
        for p in self.daemons:
            p.kill()
            p.wait()
            p.stderr.close()
        self.daemons.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The launching shell's environment: this process's (less what colossalai cannot export
        safely, and less GLOO_SOCKET_IFNAME), the client ``HOME``, the venv first on ``PATH``, gloo
        for the CPU ranks (Chapter 1, "Where the ranks run"), then ``extra``."""
        env = {k: v for k, v in os.environ.items() if not _UNSAFE.search(v)}
        env.pop("GLOO_SOCKET_IFNAME", None)
        env |= {"HOME": str(self.home), "PATH": f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"}
        return env | placement_env(2, gpus=0) | (extra or {})

    def set_etc_hosts(self, k: int, text: str) -> None:
        """Give host ``k`` this ``/etc/hosts``, seen also by what already runs there (its sshd):
        the same file is rewritten, so every bind mount of it shows the new text."""
        with open(NETNS_ETC / self.hosts.hosts[k].netns / "hosts", "r+") as f:
            f.write(text)
            f.truncate()

    def kill_jobs(self) -> None:
        """Kill everything on every host but the SSH daemons: what a failed launch leaves."""
        keep = {p.pid for p in self.daemons}
        for _ in range(3):  # an agent being killed may still start a worker: sweep again
            left = [p for k in range(self.hosts.n) for p in self.hosts.processes(k)]
            left = [p for p in left if p not in keep]
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, 9)
            if not left:
                return
            time.sleep(0.2)


def reader_command(nproc_per_node: int, module: str, args=(), hostfile="hostfile") -> list[str]:
    """What the reader types on the launching host (Chapter 5)."""
    return ["colossalai", "run", "--hostfile", hostfile, "--nproc_per_node", str(nproc_per_node),
            "-m", module, *map(str, args)]  # fmt: skip


def check_hostfile(ssh: SshHosts, names: list[str], launch_from: int = 0) -> None:
    """Refuse, naming the reason, a hostfile ``colossalai run`` would mishandle: empty (it runs
    on this machine alone, run.py:268-273), a name twice, a name the launching host cannot
    resolve (hostinfo.py:44-47 resolves each there), or a first host named as the launching
    machine sees itself, which becomes every node's ``--master_addr`` (run.py:290-291)."""
    if not names:
        raise ValueError("the hostfile names no host: colossalai would run on this machine only")
    if len(set(names)) < len(names):
        raise ValueError(f"the hostfile names a host twice: {names}")
    for name in names:
        if ssh.hosts.run(launch_from, ["getent", "hosts", name], timeout_s=10).returncode != 0:
            where = ssh.hosts.hosts[launch_from].name
            raise ValueError(f"the hostfile names {name!r}, which {where} cannot resolve")
    if len(names) > 1 and names[0] in ("localhost", "127.0.0.1", "0.0.0.0"):
        raise ValueError(f"the hostfile's first host {names[0]!r} becomes every node's "
                         "--master_addr, and on the other hosts it names themselves")  # fmt: skip


_TORCHRUN = re.compile(r"^cd \S+ && export .* && (torchrun .*--node_rank=(\d+) .*)$")
_EVIDENCE = re.compile(
    r"\S+ resolves to 127\.[\d.]+|connectFullMesh failed.*|timed out after \d+ms while trying to "
    r"connect.*|waiting for clients\..*|^\S+: (success|failure)$"
)
CAUSES = {
    r"connectFullMesh failed.*remote=\[127\.": "loopback: each host's name resolves to 127.0.1.1 "
    "there, gloo binds to that address and advertises it, and the other host's ranks dial their "
    "own loopback",
    r"trying to connect to \((localhost|127\.0\.0\.1), ": "master_addr: colossalai makes the "
    "hostfile's first entry every node's --master_addr, and on the other hosts it names themselves",
}


def hostfile_launch(ssh: SshHosts, module: str = "helpers.demos.ch05_hostfile", args=(),
                    hostfile: list[str] | None = None, launch_from: int = 0,
                    nproc_per_node: int = 2, env: dict[str, str] | None = None,
                    timeout_s: float = 120.0, check: bool = True) -> dict:  # fmt: skip
    """Run ``colossalai run --hostfile hostfile --nproc_per_node N -m module args`` on host
    ``launch_from`` in a project folder holding ``hostfile`` (default: every host's name, one a
    line) and the book's ``helpers`` (a link to this repository's). Returns a JSON-able dict: the
    hostfile, the command, each node's torchrun line as fabric echoed it, the ranks each host
    reported, every RESULT, the exit code, the lines that tell what happened (``evidence``), the
    ``cause`` of a failure when known, and the seconds. Past ``timeout_s`` every process of the job
    is killed (``timed_out``). ``check``: :func:`check_hostfile` first."""
    if not 0 <= launch_from < ssh.hosts.n:
        raise IndexError(f"host {launch_from} does not exist: there are {ssh.hosts.n}")
    names = [h.name for h in ssh.hosts.hosts] if hostfile is None else list(hostfile)
    if check:
        check_hostfile(ssh, names, launch_from)
    project = Path(tempfile.mkdtemp(prefix="project-", dir=ssh.dir))
    (project / "helpers").symlink_to(REPO_ROOT / "helpers")
    (project / "hostfile").write_text("".join(f"{n}\n" for n in names))
    cmd = reader_command(nproc_per_node, module, args)
    start, timed_out = time.monotonic(), False
    proc = ssh.hosts.popen(launch_from, cmd, cwd=project, env=ssh.env(env), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        out = proc.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        timed_out = True
        ssh.kill_jobs()
        out = proc.communicate()[0]
    seconds = time.monotonic() - start
    ssh.kill_jobs()  # torchrun agents a failed launch leaves behind on the other hosts
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.splitlines()]
    torchrun, ranks = {}, {}
    for line in lines:
        if m := _TORCHRUN.match(line):
            torchrun.setdefault(int(m.group(2)), m.group(1))
        if m := re.search(r"rank (\d+) on (\S+): ", line):
            ranks.setdefault(m.group(2), []).append(int(m.group(1)))
    log = "\n".join(lines)
    return {
        "hostfile": (project / "hostfile").read_text(),
        "command": " ".join(cmd),
        "launched_from": ssh.hosts.hosts[launch_from].name,
        "torchrun": [torchrun[k] for k in sorted(torchrun)],
        "ranks": {h: sorted(r) for h, r in sorted(ranks.items())},
        "results": sorted(results_of(lines), key=lambda r: r["rank"]),
        "returncode": None if timed_out else proc.returncode,
        "timed_out": timed_out,
        "evidence": list(dict.fromkeys(m.group(0) for ln in lines if (m := _EVIDENCE.search(ln)))),
        "cause": next(
            (c for p, c in CAUSES.items() if proc.returncode and re.search(p, log)), None
        ),
        "seconds": round(seconds, 2),
        "lines": [ln for ln in lines if not _TORCHRUN.match(ln) and not ln.startswith("frame #")],
    }


def debian_etc_hosts(hosts: Hosts, k: int) -> str:
    """Host ``k``'s ``/etc/hosts`` as Debian's installer writes it (its own name on 127.0.1.1),
    the other hosts by their addresses."""
    others = "".join(f"{h.address} {h.name}\n" for h in hosts.hosts if h.index != k)
    return f"127.0.0.1 localhost\n127.0.1.1 {hosts.hosts[k].name}\n{others}"


# name -> (Debian /etc/hosts on every host, hostfile or None for every host, extra environment,
# the demo's process-group timeout); PET_RDZV_CONF is torchrun's --rdzv_conf, which colossalai's
# --extra_launch_args cannot carry ("timeout=5" holds a second "=", run.py:147-150)
SCENARIOS = {
    "works": (False, None, {}, 60),
    "loopback_hang": (True, None, {}, 3),
    "loopback_fix": (True, None, {"GLOO_SOCKET_IFNAME": "eth0"}, 60),
    "master_addr_hang": (False, ["localhost", "host1"], {"PET_RDZV_CONF": "timeout=5"}, 60),
}


def scenario(name: str) -> dict:
    """One of :data:`SCENARIOS` on two fresh hosts, launched from host0."""
    if name not in SCENARIOS:
        raise ValueError(f"no scenario {name!r}: the scenarios are {', '.join(SCENARIOS)}")
    debian, hostfile, env, pg_timeout = SCENARIOS[name]
    with Hosts(2) as hosts, SshHosts(hosts) as ssh:
        for k in range(hosts.n) if debian else ():
            ssh.set_etc_hosts(k, debian_etc_hosts(hosts, k))
        done = hostfile_launch(ssh, args=["--timeout_s", pg_timeout], hostfile=hostfile,
                               env=env, check=hostfile is None)  # fmt: skip
    return {"scenario": name, "debian_etc_hosts": debian, "env": env, **done}


def scenarios(names=tuple(SCENARIOS), timeout_s: float = 300.0) -> dict[str, dict]:
    """:func:`scenario` for each name, all at once, each in a process of its own (so each has its
    own host0 and host1): the hangs wait while the others work."""
    procs = {n: subprocess.Popen([sys.executable, "-m", "helpers.cluster.ssh", n], cwd=REPO_ROOT,
             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in names}  # fmt: skip
    end, out = time.monotonic() + timeout_s, {}
    try:
        for n, p in procs.items():
            stdout, stderr = p.communicate(timeout=max(1.0, end - time.monotonic()))
            if p.returncode != 0 or not stdout.startswith("SCENARIO "):
                raise RuntimeError(f"scenario {n} failed ({p.returncode}): {stderr[-2000:]}")
            out[n] = json.loads(stdout[len("SCENARIO ") :])
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()  # its Hosts remove themselves on SIGTERM
                p.wait(timeout=30)
    return out


BOOK = ("works", "loopback_hang", "loopback_fix")  # Chapter 5's three: the hang and its fix


def book_scenarios() -> dict:
    """Chapter 5's hostfile runs (:data:`BOOK`), for ``helpers.chapters.ch05_multinode``."""
    return {"scenarios": scenarios(BOOK)}


if __name__ == "__main__":  # python -m helpers.cluster.ssh NAME: one scenario, as one JSON line
    print("SCENARIO " + json.dumps(scenario(sys.argv[1])), flush=True)
