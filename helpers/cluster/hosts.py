"""Several hosts on one machine: network namespaces joined by a switch, for Chapter 5's multi-node
launches ("Launching with torchrun") and Chapter 8's node faults.

    with Hosts(2) as hosts:                     # host0 10.213.0.1, host1 10.213.0.2
        hosts.run(1, ["hostname"])              # -> "host1"
        procs = [hosts.popen(k, torchrun_cmd(k)) for k in range(2)]

Each host is a network namespace (``ip netns``) with its own loopback and one interface ``eth0``,
the end of a veth pair whose other end sits on a bridge inside a switch namespace of its own.
Nothing is added to the machine's own namespace, so traffic goes only between the hosts (and each
host's loopback), never to another address. Each host has a hostname (a UTS namespace per
command, ``unshare --uts``) and an ``/etc/hosts`` naming every host (``ip netns exec`` mounts
``/etc/netns/<namespace>/hosts`` over ``/etc/hosts``).

Clean-up is guaranteed: leaving the ``with`` block (normally, on an exception or on SIGINT/SIGTERM)
kills every process left in the hosts and deletes the namespaces; the namespaces' names carry the
creating process id, so :func:`remove_stale` can delete those of a process that died before.

Without root or without ``ip netns`` the hosts fall back to agents on loopback (127.0.0.1, one
shared hostname), and ``Hosts.mode`` and ``Hosts.banner()`` say so.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

PREFIX = "book"  # namespace names: book<pid>h<k> and book<pid>sw
SUBNET = "10.213.0"  # host k is 10.213.0.<k+1>/24
NETNS_ETC = Path("/etc/netns")


@dataclass(frozen=True)
class Host:
    """One host: its index, hostname, address, and its namespace (None on loopback)."""

    index: int
    name: str
    address: str
    netns: str | None


def _ip(*args: str, netns: str | None = None) -> None:
    cmd = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")


def namespaces_possible() -> str | None:
    """None when network namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "no ip or unshare command"
    probe = f"{PREFIX}{os.getpid()}probe"
    try:
        _ip("netns", "add", probe)
    except OSError as e:
        return str(e)
    _ip("netns", "del", probe)
    return None


def _owned() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def _pid_of(netns: str) -> int | None:
    digits = netns[len(PREFIX) :].split("h")[0].split("sw")[0]
    return int(digits) if digits.isdigit() else None


def _delete(netns: str) -> None:
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    for pid in map(int, pids.split()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["ip", "netns", "del", netns], capture_output=True)
    shutil.rmtree(NETNS_ETC / netns, ignore_errors=True)


def remove_stale() -> list[str]:
    """Delete the namespaces of this module whose creating process is gone; returns their
    names."""
    gone = []
    for netns in _owned() if shutil.which("ip") else []:
        pid = _pid_of(netns)
        if pid is not None and pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            _delete(netns)
            gone.append(netns)
    return gone


class Started:
    """A context manager over ``_start()`` and ``close()``: what a half-finished ``_start`` made
    is removed too (the hosts here, the daemons of :mod:`helpers.cluster.ssh` and
    :mod:`helpers.cluster.slurm`)."""

    def _start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Hosts(Started):
    """``n`` hosts on this machine (a context manager); ``namespaces=False`` forces the loopback
    fallback."""

    def __init__(self, n: int, namespaces: bool = True):
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 200:
            raise ValueError(f"the number of hosts must be an integer from 1 to 200, got {n!r}")
        self.n = n
        self.why_loopback = namespaces_possible() if namespaces else "asked for loopback"
        self.mode = "loopback" if self.why_loopback else "namespaces"
        tag = f"{PREFIX}{os.getpid()}"
        self.switch = f"{tag}sw" if self.mode == "namespaces" else None
        self.hosts = [
            Host(k, f"host{k}", f"{SUBNET}.{k + 1}", f"{tag}h{k}")
            if self.mode == "namespaces"
            else Host(k, os.uname().nodename, "127.0.0.1", None)
            for k in range(n)
        ]
        self._made: list[str] = []
        self._old_handlers: dict[int, object] = {}
        self._started: list[subprocess.Popen] = []  # popen()'s, killed by close() (namespaces)

    def banner(self) -> str:
        """One line saying what the hosts are."""
        if self.mode == "namespaces":
            names = ", ".join(f"{h.name} {h.address}" for h in self.hosts)
            return f"{self.n} hosts in network namespaces joined by a bridge: {names}"
        return (
            f"network namespaces unavailable ({self.why_loopback}): {self.n} node agents on "
            "loopback 127.0.0.1 instead"
        )

    # -- making and removing ----------------------------------------------------------------
    def _start(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old_handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: the with block's exit still cleans up
                pass
        if self.mode == "namespaces":
            self._make()

    def _on_signal(self, signum, frame) -> None:
        self.close()
        raise KeyboardInterrupt(f"signal {signum}: hosts removed")

    def _make(self) -> None:
        remove_stale()
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("link", "add", "br0", "type", "bridge", netns=self.switch)
        _ip("link", "set", "br0", "up", netns=self.switch)
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{h.address} {h.name}\n" for h in self.hosts
        )
        for h in self.hosts:
            _ip("netns", "add", h.netns)
            self._made.append(h.netns)
            (NETNS_ETC / h.netns).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / h.netns / "hosts").write_text(hosts_file)
            port = f"p{h.index}"
            _ip("link", "add", "eth0", "netns", h.netns, "type", "veth", "peer", port,
                "netns", self.switch)  # fmt: skip
            _ip("link", "set", port, "master", "br0", "up", netns=self.switch)
            _ip("addr", "add", f"{h.address}/24", "dev", "eth0", netns=h.netns)
            _ip("link", "set", "eth0", "up", netns=h.netns)
            _ip("link", "set", "lo", "up", netns=h.netns)

    def close(self) -> None:
        """Kill what runs in the hosts and delete them (idempotent); popen()'s processes by pid
        too: one not yet in its namespace (nsenter enters a moment later) is not among its pids."""
        for proc in self._started if self.mode == "namespaces" else ():
            if proc.poll() is None:
                proc.kill()
        self._started.clear()
        for netns in reversed(self._made):
            _delete(netns)
        self._made.clear()
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()

    # -- running ----------------------------------------------------------------------------
    def _host(self, k: int) -> Host:
        if not 0 <= k < self.n:
            raise IndexError(f"host {k} does not exist: there are {self.n} (0..{self.n - 1})")
        return self.hosts[k]

    def command(self, k: int, cmd: list[str]) -> list[str]:
        """``cmd`` as run on host ``k``: in its network namespace, under its hostname, with its
        ``/etc/hosts``.

        ``nsenter --net`` rather than ``ip netns exec``: the latter remounts ``/sys``, and daemons
        that read ``/sys/fs/cgroup`` (slurmd) then fail. A private mount namespace
        (``unshare --mount``) carries the host's ``/etc/hosts`` instead."""
        h = self._host(k)
        if h.netns is None:
            return list(cmd)
        inner = (
            f"mount --bind {NETNS_ETC / h.netns / 'hosts'} /etc/hosts && "
            f'hostname {h.name} && exec "$@"'
        )
        return ["nsenter", f"--net=/run/netns/{h.netns}", "unshare", "--uts", "--mount",
                "sh", "-c", inner, "sh", *cmd]  # fmt: skip

    # -- faults and links (namespaces only) ---------------------------------------------------
    def _needs_namespaces(self, what: str) -> None:
        if self.mode != "namespaces":
            raise RuntimeError(f"{what} needs the hosts in namespaces ({self.why_loopback})")

    def kill(self, k: int) -> int:
        """Kill every process on host ``k`` at once (SIGKILL), as a lost node: returns how many.
        The host itself stays, so it can "come back" with new processes."""
        self._needs_namespaces("killing a host")
        pids = subprocess.run(
            ["ip", "netns", "pids", self._host(k).netns], capture_output=True, text=True
        ).stdout.split()
        for pid in map(int, pids):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def processes(self, k: int) -> list[int]:
        """The process ids running on host ``k`` (a killed process that its parent has not reaped
        yet, a zombie, is not running)."""
        self._needs_namespaces("listing a host's processes")
        out = subprocess.run(
            ["ip", "netns", "pids", self._host(k).netns], capture_output=True, text=True
        ).stdout
        return [int(p) for p in out.split() if _running(p)]

    def set_link(self, k: int, up: bool) -> None:
        """Unplug (``up=False``) or plug back host ``k``'s cable: its port on the switch goes down
        or up, and the host itself notices nothing (as a failed switch port or cable)."""
        self._needs_namespaces("taking a link down")
        _ip("link", "set", f"p{self._host(k).index}", "up" if up else "down", netns=self.switch)

    def shape(self, k: int, rate: str | None, burst: str = "64kb", latency: str = "200ms") -> None:
        """Limit host ``k``'s link to ``rate`` (``tc`` units, e.g. "1gbit", "200mbit") in both
        directions with a token bucket (``tbf``) on each end of its veth pair; ``None`` removes it.

        Rate, not delay: ``netem`` is not in every kernel, ``tbf`` is."""
        self._needs_namespaces("shaping a link")
        h = self._host(k)
        for dev, ns in (("eth0", h.netns), (f"p{h.index}", self.switch)):
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)  # fmt: skip
            if rate is not None:
                cmd = ["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                       "burst", burst, "latency", latency]  # fmt: skip
                done = subprocess.run(cmd, capture_output=True, text=True)
                if done.returncode != 0:
                    raise OSError(f"{' '.join(cmd)}: {done.stderr.strip()}")

    def popen(self, k: int, cmd: list[str], **kwargs) -> subprocess.Popen:
        """Start ``cmd`` on host ``k`` (``subprocess.Popen`` keywords pass through)."""
        proc = subprocess.Popen(self.command(k, cmd), **kwargs)
        self._started.append(proc)
        return proc

    def run(self, k: int, cmd: list[str], timeout_s: float = 60, **kwargs):
        """Run ``cmd`` on host ``k`` to its end; a ``subprocess.CompletedProcess`` with text
        output."""
        kwargs.setdefault("capture_output", True)
        return subprocess.run(self.command(k, cmd), text=True, timeout=timeout_s, **kwargs)


def _running(pid: str) -> bool:
    """Whether process ``pid`` exists and is not a zombie (state Z or X in /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
