"""Chapter 8, "Hang forensics": what ``NCCL_DEBUG=INFO`` says about the transport and the channels.

Every line NCCL logs at INFO level is built in ``src/debug.cc`` (``ncclDebugLog``): an optional
timestamp (``NCCL_DEBUG_TIMESTAMP_FORMAT``, default ``"[%F %T] "``, printed only for the levels
``NCCL_DEBUG_TIMESTAMP_LEVELS`` names), then ``"%s:%d:%d "`` (host name, pid, thread id), then
``"[%d] NCCL INFO %s"`` with the CUDA device. The messages read here, with the format strings of
NCCL 2.30's sources (``NVIDIA/nccl``):

* ``src/init.cc``: ``"comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d"``
  and ``"%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, %d p2p
  channels per peer"`` (the channel counts chosen after tuning);
* ``src/graph/rings.cc`` (``ncclBuildRings``, rank 0 only): ``"Channel %02d/%02d :"`` and the
  ring's ranks, one line per ring;
* the connection of each peer on each channel, by transport: ``src/transport/p2p.cc``
  ``"Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/direct pointer%s"`` (same process),
  ``"... via P2P/%s%s%s"`` (``CUMEM`` or ``MNNVL``, ``/read``, ``/CE``), ``"... via P2P/IPC%s%s"``
  and ``"... via P2P/indirect/%d[%d]%s"``; ``src/transport/shm.cc`` ``"Channel %02d : %d[%d] ->
  %d[%d] via SHM/direct"``; ``src/transport/net.cc`` ``"Channel %02d/%d : %d[%d] -> %d[%d]
  [send] via NET/%s/%d%s%s%s"`` (and ``[receive]``): network name, device, ``/GDRDMA``.

What one rank prints with no peer to connect to (:data:`ONE_RANK`): the version (``src/init.cc``
``"NCCL version %s"``, with the prefix at INFO, without it at the VERSION level), the network
(``"Using network %s"``), each variable it read from the environment (``src/misc/param.cc``
``"%s set by environment to %s."``), the graph search's result (``src/graph/search.cc``
``"Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d"``), the tuner's
table (``src/graph/tuning.cc``, rank 0: an ``Algorithm`` row, a ``Protocol`` row, then one row
per operation of ``"%8.1f/%6.1f |"`` cells, the model's latency in µs and bandwidth in GB/s), the
initialisation's time (``"Init timings - %s: rank %d nranks %d total %.2f (...)"``) and, with
``COLL``, one line per call (``src/enqueue.cc`` ``"%s: opCount %lx sendbuff %p recvbuff %p count
%zu datatype %d op %d root %d comm %p [nranks=%d] stream %p"``).

:func:`parse` turns a log into one :class:`NcclSummary` per process: all of the above that it
finds. NCCL prints these lines only where it runs, on GPUs.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

# [start: nccl-regex]
PREFIX = re.compile(
    r"^(?:\[[^\]]*\] )?(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) "
    r"\[(?P<dev>\d+)\] NCCL INFO (?P<msg>.*)$"
)
CONNECTION = re.compile(
    r"^Channel (?P<channel>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<src_dev>\d+)\] -> "
    r"(?P<dst>\d+)\[(?P<dst_dev>\d+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>\S.*)$"
)
CHANNELS = re.compile(
    r"^(?P<coll>\d+) coll channels, (?P<collnet>\d+) collnet channels, (?P<nvls>\d+) nvls "
    r"channels, (?P<p2p>\d+) p2p channels, (?P<per_peer>\d+) p2p channels per peer"
)
RING = re.compile(r"^Channel (?P<ring>\d+)/(?P<rings>\d+) :(?P<ranks>(?: +\d+)+)$")
COMM = re.compile(
    r"^comm (?P<ptr>\S+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+) "
    r"localRanks (?P<local_ranks>\d+) localRank (?P<local_rank>\d+)(?: MNNVL (?P<mnnvl>\d+))?"
)
# [end: nccl-regex]
# [start: nccl-one-rank]
VERSION = re.compile(r"^NCCL version (?P<version>\S+)")
NETWORK = re.compile(r"^Using network (?P<net>.+)$")
ENV = re.compile(r"^(?P<var>NCCL_\w+) set by environment to (?P<value>.*?)\.?$")
GRAPH = re.compile(
    r"^Pattern (?P<pattern>\d+), crossNic \d+, nChannels (?P<channels>\d+), "
    r"bw (?P<bw>[\d.]+)/(?P<bw_inter>[\d.]+), type (?P<intra>[^/\s]+)/(?P<inter>[^,\s]+)"
)
TIMINGS = re.compile(r"^Init timings(?: - \w+)?: rank \d+ nranks \d+ total (?P<total>[\d.]+)")
CALL = re.compile(
    r"^(?P<op>\w+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ "
    r"count (?P<count>\d+) datatype (?P<dtype>\d+) op (?P<redop>\d+) root (?P<root>-?\d+) "
    r"comm \S+ \[nranks=(?P<nranks>\d+)\]"
)
TABLE_CELL = re.compile(r"(?P<lat>[\d.]+)/ *(?P<bw>[\d.]+) \|")
# [end: nccl-one-rank]
# what one rank's log says, in the order of the notebook's table: field -> what it is
ONE_RANK = {
    "version": "NCCL version",
    "network": "network plugin chosen (Using network)",
    "ranks": "communicator: ranks, nodes",
    "coll_channels": "collective channels after tuning",
    "rings": "rings listed (rank 0)",
    "graph": "graph search: pattern, channels, GB/s, path type",
    "tuning": "tuner table: operations × algorithm/protocol cells",
    "init_s": "initialisation time (s)",
    "calls": "collective calls logged (COLL)",
    "env": "NCCL variables read from the environment",
}


@dataclass
class NcclSummary:
    """What one process's INFO lines say (one process drives one GPU, one rank per comm)."""

    pid: int
    rank: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    coll_channels: int | None = None
    p2p_channels: int | None = None
    rings: dict[int, list[int]] = field(default_factory=dict)
    transports: Counter = field(default_factory=Counter)  # "P2P/CUMEM/read" -> connections
    connections: list[dict] = field(default_factory=list)
    version: str = ""
    network: str = ""
    init_s: float | None = None
    env: dict[str, str] = field(default_factory=dict)
    graphs: list[dict] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)
    # operation -> "algorithm/protocol" -> (latency µs, bandwidth GB/s), the tuner's model
    tuning: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        """The transport family most connections use: P2P, SHM or NET (or "" if none seen)."""
        families = Counter()
        for via, n in self.transports.items():
            families[via.split("/")[0]] += n
        return families.most_common(1)[0][0] if families else ""


def transport_of(via: str) -> str:
    """``via`` of a connection line without the peer-specific tail: ``P2P/CUMEM/read``,
    ``SHM/direct``, ``NET/IB/0/GDRDMA`` (device kept), ``P2P/indirect`` (peer dropped)."""
    via = via.strip()
    if via.startswith("P2P/indirect/"):
        return "P2P/indirect"
    return via


# [start: nccl-parse]
def parse(lines) -> dict[int, NcclSummary]:
    """One summary per process (by pid) from NCCL INFO lines; other lines are ignored."""
    out: dict[int, NcclSummary] = {}
    tables: dict[int, dict] = {}
    for line in lines:
        m = PREFIX.match(line.rstrip())
        if not m:
            continue
        pid, msg = int(m["pid"]), m["msg"].rstrip()
        s = out.setdefault(pid, NcclSummary(pid))
        if c := COMM.match(msg):
            s.rank, s.nranks, s.nnodes = int(c["rank"]), int(c["nranks"]), int(c["nnodes"])
        elif c := CHANNELS.match(msg):
            s.coll_channels, s.p2p_channels = int(c["coll"]), int(c["p2p"])
        elif c := CONNECTION.match(msg):
            via = transport_of(c["via"])
            s.transports[via] += 1
            s.connections.append(
                {
                    "channel": int(c["channel"]),
                    "src": int(c["src"]),
                    "dst": int(c["dst"]),
                    "via": via,
                    "dir": c["dir"] or "",
                }
            )
        elif c := RING.match(msg):
            s.rings[int(c["ring"])] = [int(r) for r in c["ranks"].split()]
        else:
            _one_rank(s, msg, tables.setdefault(pid, {}))
    return out
    # [end: nccl-parse]


def _one_rank(s: NcclSummary, msg: str, table: dict) -> None:
    """The lines a rank prints without a peer (:data:`ONE_RANK`); ``table``: the tuner table's
    algorithms and protocols read so far."""
    if c := VERSION.match(msg):
        s.version = c["version"]
    elif c := NETWORK.match(msg):
        s.network = c["net"].strip()
    elif c := ENV.match(msg):
        s.env[c["var"]] = c["value"]
    elif c := GRAPH.match(msg):
        s.graphs.append(
            {
                "pattern": int(c["pattern"]),
                "channels": int(c["channels"]),
                "bw": float(c["bw"]),
                "type": f"{c['intra']}/{c['inter']}",
            }
        )
    elif c := TIMINGS.match(msg):
        s.init_s = float(c["total"])
    elif c := CALL.match(msg):
        s.calls.append({"op": c["op"], "count": int(c["count"]), "nranks": int(c["nranks"])})
    elif msg.startswith("  Algorithm   |"):
        table["algos"] = [a.strip() for a in msg.split("|")[1:] if a.strip()]
    elif msg.startswith("  Protocol    |"):
        table["protos"] = [p.strip() for p in msg.split("|")[1:] if p.strip()]
    elif "|" in msg and table.get("algos") and (cells := TABLE_CELL.findall(msg)):
        op, per = msg.split("|")[0].strip(), len(table["protos"]) // 3 or 1
        for i, (lat, bw) in enumerate(cells[: len(table["algos"]) * per]):
            name = f"{table['algos'][i // per]}/{table['protos'][i % per]}"
            s.tuning.setdefault(op, {})[name] = (float(lat), float(bw))


def version_of(lines) -> str:
    """The NCCL version a log names: the INFO line's, or the VERSION level's bare line."""
    for line in lines:
        m = PREFIX.match(line.rstrip())
        if c := VERSION.match(m["msg"] if m else line.strip()):
            return c["version"]
    return ""


def rows(summaries: dict[int, NcclSummary]) -> list[dict]:
    """A table row per rank: transport, channels, rings seen."""
    return [
        {
            "rank": s.rank,
            "ranks": s.nranks,
            "nodes": s.nnodes,
            "transport": s.transport,
            "as logged": ", ".join(f"{v} ×{n}" for v, n in sorted(s.transports.items())),
            "coll channels": s.coll_channels,
            "p2p channels": s.p2p_channels,
            "rings listed": len(s.rings),
        }
        for s in sorted(summaries.values(), key=lambda s: (s.rank is None, s.rank or 0))
    ]


def facts(s: NcclSummary) -> list[dict]:
    """What one process's log says, a row per entry of :data:`ONE_RANK` that it has, and one for
    its connections when it has peers."""
    graph = s.graphs[-1] if s.graphs else None
    said = {
        "version": s.version,
        "network": s.network,
        "ranks": f"{s.nranks} rank(s) on {s.nnodes} node(s)" if s.nranks else "",
        "coll_channels": s.coll_channels,
        "rings": len(s.rings) or "",
        "graph": graph
        and f"pattern {graph['pattern']}, {graph['channels']} ch, {graph['bw']:g}, {graph['type']}",
        "tuning": s.tuning
        and f"{len(s.tuning)} × {max(len(v) for v in s.tuning.values())} "
        f"({', '.join(sorted(s.tuning)[:3])}, ...)",
        "init_s": s.init_s,
        "calls": s.calls and ", ".join(f"{c['op']} ({c['count']})" for c in s.calls),
        "env": ", ".join(f"{k}={v}" for k, v in sorted(s.env.items())),
    }
    out = [
        {"what": ONE_RANK[k], "the log says": v}
        for k, v in said.items()
        if v not in ("", None, [], {})
    ]
    if s.transports:  # two ranks or more: the connections, by transport
        via = ", ".join(f"{v} ×{n}" for v, n in sorted(s.transports.items()))
        out.append({"what": "connections by transport", "the log says": via})
    return out


def firsts(lines) -> list[str]:
    """The first line of each kind the parser reads (version, network, communicator, channels,
    ring, graph, timings, call, variable, connection), in the log's order: an excerpt."""
    kinds = [VERSION, NETWORK, COMM, CHANNELS, RING, GRAPH, TIMINGS, CALL, ENV, CONNECTION]
    seen, out = set(), []
    for line in lines:
        m = PREFIX.match(line.rstrip())
        msg = m["msg"].rstrip() if m else line.strip()
        kind = next((i for i, r in enumerate(kinds) if r.match(msg)), None)
        if kind is not None and kind not in seen:
            seen.add(kind)
            out.append(line.rstrip())
    return out
