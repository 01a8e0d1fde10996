"""Chapter 8, "Hang forensics": what the notebook does not check (helpers/train/flight_labs.py,
flight_recorder.py, nccl_info.py, helpers/chapters/ch08_flight.py, helpers/record/nccl_info.py).

The two labs that hang on gloo CPU ranks, their dumps, the analyser's verdict and the figure run
once, in notebooks/08_troubleshooting.ipynb, whose cells assert what they show. Here: the naive
cool-down against the book's 1F1B, the divergence and the group table on hand-made dumps, the
NCCL INFO parser on lines built from NCCL's own format strings (two ranks, and one rank with no
peer), the arguments of an NCCL run, and the recorder of a one-GPU NCCL log: its capture of NCCL's
lines, its refusal without a GPU, and the record it writes."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from helpers.chapters import ch08_flight as show
from helpers.parallel.pp_schedules import one_f_one_b
from helpers.train import flight_labs as fl
from helpers.train import flight_recorder as fr
from helpers.train import nccl_info as ni


def test_the_naive_cool_down_differs_only_below_p_minus_one_micro_batches():
    for p in (2, 3, 4):
        for m in range(1, 7):
            naive, capped = fl.naive_1f1b(p, m), one_f_one_b(p, m)
            assert (naive == capped) == (m >= p - 1), (p, m)
    stage0 = fl.naive_1f1b(4, 2)[0]
    assert [a.label() for a in stage0] == ["F0", "F1", "BW0", "BW1", "BW2"]
    assert fl.rule_says(4, 2) and not fl.rule_says(4, 4)


def test_the_group_table_rebuilt_for_the_analyser(tmp_path):
    dumps = {
        r: {
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
            "entries": [
                {
                    "process_group": ("0", "default_pg"),
                    "collective_seq_id": s,
                    "profiling_name": "gloo:all_reduce",
                    "input_sizes": [[4]],
                    "retired": True,
                }
                for s in range(1, 3 if r < 2 else 2)
            ],
        }
        for r in range(3)
    }
    assert fr.divergence(dumps)["missing"] == [2] and fr.divergence(dumps)["seq"] == 2
    send = {
        "process_group": ("0", "default_pg"),
        "collective_seq_id": 1,
        "is_p2p": True,
        "profiling_name": "nccl:send 0->1",
        "input_sizes": [[4]],
        "retired": False,
    }
    dumps[0]["entries"].insert(0, send)  # point-to-point entries are not collectives to match
    assert fr.divergence(dumps)["seq"] == 2
    for r, d in dumps.items():
        (tmp_path / f"{fr.PREFIX}{r}").write_bytes(pickle.dumps(d))
    assert fr.read(tmp_path)[2]["entries"][0]["collective_seq_id"] == 1


CASES = [("nvlink", "P2P", "P2P/CUMEM/read"), ("ib", "NET", "NET/IB/0/GDRDMA")]


@pytest.mark.parametrize(("kind", "transport", "via"), [*CASES, ("shm", "SHM", "SHM/direct")])
def test_the_nccl_parser_reads_transport_and_channels(kind, transport, via):
    lines = ["unrelated line", *show.example_lines(kind, channels=4)]
    lines.insert(3, "[2026-12-05 06:00:00] node0:1000:1007 [0] NCCL INFO Channel 02/04 : 0 1")
    got = ni.parse(lines)
    assert sorted(s.rank for s in got.values()) == [0, 1]
    for s in got.values():
        assert s.transport == transport and s.transports == {via: 4}
        assert (s.coll_channels, s.p2p_channels, s.nranks) == (4, 8, 2)
    rank0 = next(s for s in got.values() if s.rank == 0)
    assert sorted(rank0.rings) == [0, 1, 2, 3] and rank0.rings[2] == [0, 1]
    assert ni.rows(got)[0]["transport"] == transport


def test_the_nccl_parser_keeps_direction_and_drops_the_indirect_peer():
    line = "h:1:2 [1] NCCL INFO Channel 03/1 : 1[1] -> 0[0] [receive] via NET/Socket/0"
    ind = "h:1:2 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/indirect/3[3]/read"
    warn = "h:1:2 [1] misc.cc:10 NCCL WARN Channel 00/0 : 1[1] -> 2[2] via P2P/IPC"
    s = ni.parse([line, ind, warn])[1]
    assert s.connections[0] == {
        "channel": 3,
        "src": 1,
        "dst": 0,
        "via": "NET/Socket/0",
        "dir": "receive",
    }
    assert s.transports == {"NET/Socket/0": 1, "P2P/indirect": 1}


def test_nccl_runs_set_the_watchdog_dump():
    env = show.nccl_env("/d")
    assert (
        env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
        and env["TORCH_FR_DUMP_TEMP_FILE"] == f"/d/{fr.PREFIX}"
    )
    args = show.lab_args("pipeline", "/d", "nccl", micro=2, bypass_rule=True)
    assert args[:6] == ["--lab", "pipeline", "--dir", "/d", "--backend", "nccl"]
    assert args[-3:] == ["--micro", "2", "--bypass_rule"]
    assert args[args.index("--timeout_s") + 1] == str(show.NCCL_TIMEOUT_S)
    gloo = show.lab_args("skip", "/d")  # the dump must finish before the group's timeout
    assert float(gloo[gloo.index("--timeout_s") + 1]) == show.GLOO_TIMEOUT_S > fr.STALL_S


# --- one rank's NCCL_DEBUG=INFO log: the parser, the recorder's capture ----------------------

PFX = "%s:%d:%d [%d] NCCL INFO %s"  # NCCL's src/debug.cc, after the optional timestamp


def one_rank_lines(host: str = "gpu-node-7", pid: int = 4242) -> list[str]:
    """What one rank prints, built from NCCL's format strings (module notes of nccl_info)."""
    algos = ["Tree", "Ring", "CollNetDirect"]
    table = ["  Algorithm   |" + "".join(" %14s   %14s   %14s |" % ("", a, "") for a in algos)]
    table.append("  Protocol    |" + "".join(" %14s |" % p for p in ["LL", "LL128", "Simple"] * 3))
    for op in ("Broadcast", "AllReduce"):
        cells = "".join("%8.1f/%6.1f |" % (4.0 + i, 10.0 * i) for i in range(9))
        table.append("%13s |" % op + cells)
    msgs = [
        "NCCL version 2.27.5+cuda12.9",
        "NCCL_NVLS_ENABLE set by environment to 0.",
        "Bootstrap: Using eth0:10.1.2.3<0>",
        "Using network Socket",
        "comm 0x5581c0a3e000 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0",
        "Pattern 4, crossNic 0, nChannels 16, bw 40.000000/40.000000, type LOC/PIX, sameChannels 1",
        *[("Channel %02d/%02d :" % (c, 2)) + " %3d" % 0 for c in range(2)],
        "2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, 2 p2p channels "
        "per peer",
        *table,
        "Init timings - ncclCommInitRankConfig: rank 0 nranks 1 total 0.31 (kernels 0.20, "
        "alloc 0.01, bootstrap 0.00, allgathers 0.00, topo 0.05, graphs 0.00, connections 0.00, "
        "rest 0.05)",
        "AllReduce: opCount 0 sendbuff 0x7f00 recvbuff 0x7f00 count 1048576 datatype 7 op 0 root 0 "
        "comm 0x5581c0a3e000 [nranks=1] stream 0x55",
    ]
    return [PFX % (host, pid, pid, 0, m) for m in msgs]


def test_the_nccl_parser_reads_what_one_rank_prints():
    s = ni.parse(["python says hello", *one_rank_lines()])[4242]
    assert (s.version, s.network, s.nranks, s.nnodes) == ("2.27.5+cuda12.9", "Socket", 1, 1)
    assert s.env == {"NCCL_NVLS_ENABLE": "0"} and s.rings == {0: [0], 1: [0]}
    assert s.graphs == [{"pattern": 4, "channels": 16, "bw": 40.0, "type": "LOC/PIX"}]
    assert (s.coll_channels, s.init_s, s.transport) == (2, 0.31, "")  # no peer: no transport
    assert s.calls == [{"op": "AllReduce", "count": 1048576, "nranks": 1}]
    assert sorted(s.tuning) == ["AllReduce", "Broadcast"] and len(s.tuning["AllReduce"]) == 9
    assert s.tuning["AllReduce"]["Ring/LL128"] == (8.0, 40.0)  # the 5th cell: Ring, LL128
    rows = ni.facts(s)
    assert [r["what"] for r in rows] == list(ni.ONE_RANK.values())
    assert ni.version_of(["NCCL version 2.28.3+cuda12.9"]) == "2.28.3+cuda12.9"  # VERSION level
    two = ni.parse(show.example_lines("nvlink", channels=2))
    assert ni.facts(next(iter(two.values())))[-1]["the log says"] == "P2P/CUMEM/read ×2"


def test_the_recorder_keeps_nccl_lines_masked_and_refuses_without_a_gpu(monkeypatch, tmp_path):
    from helpers.record import cli, nccl_info, results
    from helpers.run import env

    out = {0: ["ran 5 collectives", *one_rank_lines(), "RESULT {}"], -1: ["torchrun: done"]}
    log = nccl_info.nccl_log(out)
    assert len(log) == len(one_rank_lines()) and all(" NCCL INFO " in x for x in log)
    assert log[0].startswith("host:4242:4242 [0]") and "eth0:x.x.x.x<0>" in log[2]
    stamped = "[2026-01-05 10:00:00] gpu-7:1:2 [0] NCCL INFO Using network IB"
    assert (
        nccl_info.mask(stamped) == "[2026-01-05 10:00:00] host:1:2 [0] NCCL INFO Using network IB"
    )
    monkeypatch.setattr(env, "gpu_count", lambda: 0)
    with pytest.raises(SystemExit, match="needs one CUDA GPU"):
        cli.main(["nccl_info", "--record", "--gpus", "1"])
    with pytest.raises(SystemExit):  # one rank's log, or two ranks' transport lines
        cli.parse("nccl_info", ["--gpus", "3"])

    def fake_run(name, demo, gpus, args, timeout_s, show, beat, read_lines):
        assert os.environ["NCCL_DEBUG"] == "INFO" and (demo, gpus) == ("ch08_nccl_info", 1)
        return {"name": name, "ok": True, "results": [], "seconds": 1.0, **read_lines(True, out)}

    monkeypatch.setattr(env, "gpu_count", lambda: 1)
    monkeypatch.setattr(nccl_info, "run_one", fake_run)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    cli.main(["nccl_info", "--record", "--gpus", "1"])
    assert "NCCL_DEBUG" not in os.environ  # the environment is given back
    saved = json.loads(next(tmp_path.glob("*/ch08_nccl_info.json")).read_text())
    assert saved["provenance"]["command"] == "python -m helpers.record nccl_info --record --gpus 1"
    assert saved["runs"][0]["nccl_log"] == log and saved["runs"][0]["env"] == nccl_info.NCCL_ENV


def test_a_recorded_log_is_read_and_summarised():
    record = {"runs": [{"nccl_log": ["gpu:1:1 [0] NCCL INFO nothing to read", *one_rank_lines()]}]}
    facts, excerpt = show.recorded_log(record)
    assert [r["what"] for r in facts] == list(ni.ONE_RANK.values())
    assert facts[0]["the log says"] == "2.27.5+cuda12.9" and len(excerpt) == 9  # one per kind
    assert excerpt[0].endswith("NCCL version 2.27.5+cuda12.9") and show.recorded_log(None) == (
        [],
        [],
    )
    bare = {"runs": [{"nccl_log": ["NCCL version 2.28.3+cuda12.9", *one_rank_lines()[1:]]}]}
    assert show.recorded_log(bare)[0][0]["the log says"] == "2.28.3+cuda12.9"


def test_a_lab_whose_dump_was_cut_short_runs_again():
    dumped = [{"rank": 0, "dumped": "rank 1 asked"}, {"rank": 1, "dumped": "gloo:barrier #13"}]
    assert show._complete({"ranks": dumped, "dumps": {0: {}, 1: {}}})
    assert not show._complete({"ranks": dumped, "dumps": {0: {}}})  # rank 1 timed out first
    assert show._complete({"ranks": [{"rank": 0, "dumped": ""}], "dumps": {}})  # no hang


def test_the_recorded_one_rank_log_reads_as_the_page_says():
    """The stored one-GPU log: a version, a network plugin, channels, the COLL lines of the calls
    that reached NCCL (the barrier as a one-element all-reduce, no reduce-scatter line), and no
    transport line, since one rank connects to no peer."""
    from helpers.record.results import find

    record = find("ch08_nccl_info", gpus=1)
    assert record is not None
    facts, firsts = show.recorded_log(record)
    said = {f["what"]: f["the log says"] for f in facts}
    assert said["NCCL version"].startswith("2.")
    assert said["network plugin chosen (Using network)"] in ("Socket", "IB")
    assert said["collective channels after tuning"] > 0
    calls = said["collective calls logged (COLL)"]
    assert "AllReduce (1)" in calls and "AllGather" in calls and "ReduceScatter" not in calls
    log = record["runs"][0]["nccl_log"]
    assert not any(s.transports for s in ni.parse(log).values())
    assert firsts and all("NCCL" in line for line in firsts)
