"""Chapter 6's four-framework head-to-head recorder (helpers/record/ch06.py), without a GPU: the
run list (rows alternated round by round, every run's flags accepted by its demo's parser), the
CPU rows of ``--quick``, the fallback micro-batch of a row that runs out of memory, and a second
call of the same command continuing the first one's record."""

from __future__ import annotations

import pytest

from helpers.record import ch06
from helpers.record.flagship_runs import ROUND
from helpers.train import framework_run, megatron_run

PAGE_COMMAND = "python -m helpers.record ch06 --record --gpus 1"


def _parse(demo: str, args: list[str]):
    p = framework_run.parser()
    p.set_defaults(framework=demo)
    if demo == "ch06_megatron":
        megatron_run.add_arguments(p)
    return p.parse_args(args)


def test_rows_alternate_and_every_flag_parses():
    runs = ch06.run_list()
    assert len(runs) == len(ch06.ROWS) * ch06.ROUNDS == 20
    names = [n for n, *_ in runs]
    assert names[:4] == [f"{n}{ROUND}1" for n, *_ in ch06.ROWS]
    assert names[4].endswith(ROUND + "2")  # round-major: every row once, then again
    for name, demo, args, _ in runs:
        parsed = _parse(demo, args)
        assert parsed.precision == "bf16" and parsed.seq == 2048 and parsed.layers == 16
        assert parsed.fail_on_divergence == 0.05 and parsed.name == name.split(ROUND)[0]
    micro = {n.split(ROUND)[0]: _parse(d, a).micro_batch for n, d, a, _ in runs[:4]}
    assert list(micro.values()) == [48, 48, 48, 32]
    assert ch06.COMMAND == PAGE_COMMAND


def test_quick_runs_the_cpu_rows_without_gpu_levers():
    runs = ch06.run_list(rounds=1, quick=True)
    assert [n.split(ROUND)[0].split(":")[0] for n, *_ in runs] == list(ch06.QUICK)
    for _, demo, args, _ in runs:
        assert not {"--compile", "--sdpa", "--fused_ce", "--optim"} & set(args)
        assert _parse(demo, args).layers == 2


def test_a_row_out_of_memory_runs_at_its_fallback(monkeypatch, tmp_path):
    saved, calls = {}, []

    def fake_part(tag, part, chosen, deadline, show):
        [(name, demo, gpus, args, timeout)] = chosen
        calls.append(name)
        micro = int(args[len(args) - 1 - args[::-1].index("--micro_batch") + 1])
        oom = demo == "ch06_megatron" and micro == 32
        return [{"name": name, "ok": not oom, "seconds": 1.0, "results": [{"oom": oom}]}]

    def fake_save(name, runs, command, copy_to=None, extra=None):
        saved.update(name=name, runs=runs, command=command, extra=extra)
        return tmp_path / f"{name}.json"

    monkeypatch.setattr(ch06, "run_part", fake_part)
    monkeypatch.setattr(ch06.fl, "matmul_ceiling", lambda: 800.0)
    monkeypatch.setattr(ch06, "save", fake_save)
    monkeypatch.setattr(ch06, "earlier", lambda name: None)
    runs = ch06.record(False, 1e9, True, rounds=2)
    megatron = ch06.ROWS[3][0]
    assert calls[3] == f"{megatron}{ROUND}1" and calls[4] == f"{megatron}{ROUND}1"  # again
    assert runs[3]["name"] == f"{megatron}: out of memory at 32{ROUND}1"
    assert runs[4]["fallback"] and runs[4]["micro_batch"] == 16
    assert len(runs) == 9 and saved["command"] == PAGE_COMMAND and saved["extra"]["rounds"] == 2

    # a second call of the same command keeps those runs and runs nothing again
    monkeypatch.setattr(ch06, "_kept", lambda earlier, command: runs)
    calls.clear()
    ch06.record(False, 1e9, True, rounds=2)
    assert calls == []


def test_one_gpu_only():
    with pytest.raises(ValueError, match="--gpus 1"):
        ch06._check(type("A", (), {"quick": False, "gpus": 2})())
