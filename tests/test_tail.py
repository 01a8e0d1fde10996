"""helpers.run.tail: torchrun's --tee output, where a long line can arrive in pieces, made whole."""

import io
import json
import threading

from torch.distributed.elastic.multiprocessing.tail_log import tail_logfile

from helpers.run.env import RESULT_PREFIX, results_of
from helpers.run.tail import Joiner


def test_pieces_of_one_rank_are_joined_across_other_ranks_lines():
    j = Joiner()
    assert j.feed('[default0]:RESULT {"a": 1,[default1]:hello') == ["[default1]:hello"]
    assert j.feed("[default1]:second") == ["[default1]:second"]
    assert j.feed(' "b": 2}') == [' "b": 2}']  # a launcher line, not a rank's
    assert j.feed('[default0]: "rank": 0}') == ['[default0]:RESULT {"a": 1, "rank": 0}']
    assert j.feed("W1203 torchrun's own line") == ["W1203 torchrun's own line"]
    assert j.feed("[default2]:cut off") == ["[default2]:cut off"]
    assert j.feed("[default3]:half[default0]:x") == ["[default0]:x"]
    assert j.rest() == ["[default3]:half"] and j.rest() == []


def test_torch_tail_thread_splitting_a_long_line_is_undone(tmp_path):
    """torch's own tail_logfile copies a line written in two parts as two pieces; joined, the
    RESULT line parses again."""
    log, out, finished = tmp_path / "0.log", io.StringIO(), threading.Event()
    line = RESULT_PREFIX + json.dumps({"rank": 0, "events": list(range(2000))})
    log.write_text(line[:480])  # the rank has written part of the line
    tail = threading.Thread(
        target=tail_logfile,
        args=("[default0]:", str(log), out, finished, 0.01, lambda _: True),
    )
    tail.start()
    for _ in range(1000):  # until the first piece has been copied out (10 s at most)
        if "[default0]:" in out.getvalue():
            break
        threading.Event().wait(0.01)
    with open(log, "a") as f:
        f.write(line[480:] + "\n")
    finished.set()
    tail.join()
    physical = out.getvalue().splitlines()
    assert len(physical) == 1 and physical[0].count("[default0]:") == 2  # split by torch
    j = Joiner()
    whole = [w for raw in physical for w in j.feed(raw)]
    assert results_of([w.removeprefix("[default0]:") for w in whole])[0]["events"][-1] == 1999


def test_a_long_result_leaves_in_numbered_parts_that_pass_the_pipe_whole(capsys, monkeypatch):
    from helpers.run.env import PART_PREFIX, emit

    monkeypatch.setenv("RANK", "3")
    emit(events=list(range(2000)), label="é")  # non-ASCII text is escaped: characters are bytes
    emit(small=1)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) > 3 and all(len(f"[default3]:{t}\n".encode()) <= 4096 for t in lines)
    assert lines[0].startswith(PART_PREFIX + "3 1/") and lines[-1] == RESULT_PREFIX + json.dumps(
        {"rank": 3, "small": 1}
    )
    other = [t.replace(PART_PREFIX + "3 ", PART_PREFIX + "1 ") for t in lines[:-1]]
    mixed = [x for pair in zip(lines[:-1], other) for x in pair] + lines[-1:]  # two ranks' parts
    found = results_of(mixed)
    assert [r["rank"] for r in found] == [3, 3, 3] and found[0]["events"] == list(range(2000))
    assert found[0]["label"] == "é" and found[2] == {"rank": 3, "small": 1}
    # a result whose parts did not all arrive (a rank killed while writing) is left out, and
    # the next one is read as usual
    assert results_of(lines[:1] + lines[2:]) == [{"rank": 3, "small": 1}]
    assert results_of(lines[:-2]) == []
