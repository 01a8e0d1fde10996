"""Chapter 6's notebook glue (helpers.chapters.ch06_frameworks): the arguments and the two-process
CPU run of section 3 and its place in the notebook's live table, and the columns section 4 shows
the Gemini re-run in."""

import json
from pathlib import Path

import pytest

from helpers.chapters import ch06_frameworks as frameworks_show
from helpers.chapters.ch08_troubleshooting import gemini_rows
from helpers.notebook import live

ROOT = Path(__file__).resolve().parent.parent


def test_cpu_args_name_the_framework_and_the_ddp_plugin():
    args = frameworks_show.cpu_args("fsdp2")
    flags = dict(zip(args[::2], args[1::2]))
    assert len(args) == 2 * len(flags)  # flag, value pairs
    assert flags == {
        "--framework": "fsdp2",
        "--plugin": "ddp",
        "--steps": "2",
        "--warmup": "1",
        "--ref_steps": "3",
        "--profile": "1",
        "--name": "fsdp2",
    }


def test_cpu_run_of_colossal_ai_matches_its_reference():
    r0, r1 = frameworks_show.cpu_run("colossal", timeout_s=240)
    assert (r0["rank"], r1["rank"]) == (0, 1)
    mean = [(a + b) / 2 for a, b in zip(r0["losses"], r1["losses"])]
    assert len(mean) == len(r0["reference"]) == 3
    assert max(abs(a - b) for a, b in zip(mean, r0["reference"])) <= 2e-3


def test_gemini_columns_are_the_keys_of_every_run_that_ran():
    ran = [r for r in gemini_rows() if "tokens/s" in r]
    if not ran:
        pytest.skip("no recorded ch08_gemini GPU result")
    assert all(list(r) == frameworks_show.GEMINI_COLUMNS for r in ran)


def test_the_live_table_names_the_runs_cpu_run_launches():
    rows = live.rows("06_frameworks", also=frameworks_show.LAUNCHES)
    assert [(r["run"], r["ranks"], r["0 GPUs"], r["2 GPUs"]) for r in rows] == [
        ("ch08_train", 2, "CPU, gloo", "GPU, NCCL"),
        ("ch06_deepspeed", 2, "CPU, gloo", "GPU, NCCL"),
    ]
    nb = json.loads((ROOT / "notebooks" / "06_frameworks.ipynb").read_text())
    top = "".join("".join(c["source"]) for c in nb["cells"][:3] if c["cell_type"] == "code")
    assert 'live.show("06_frameworks", also=frameworks_show.LAUNCHES)' in top
