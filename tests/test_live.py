"""helpers.notebook.live: each notebook's table of where its runs happen, computed from its own
cells."""

import json
import re

import pytest

from helpers.notebook import live


def test_every_launch_in_every_notebook_is_read():
    for path in sorted(live.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):  # chapters; not the appendix
        code = "\n".join(
            "".join(c["source"])
            for c in json.loads(path.read_text())["cells"]
            if c["cell_type"] == "code"
        )
        found = live.launches(path.stem)
        assert len(found) == len(dict.fromkeys(found))
        assert all(re.search(rf'launch\(\s*"{demo}"', code) for demo, _ in found)


def test_the_table_follows_the_rule():
    rows = {
        (r["run"], r["ranks"]): r for r in live.rows("09_quick_demos", gpu_only={"LowLevelZero": 2})
    }
    assert rows[("ch09_resnet_train", 1)]["1 GPU"] == "GPU, NCCL"
    assert rows[("ch09_resnet_train", 2)]["1 GPU"] == "CPU, gloo"
    assert (
        rows[("ch09_moe", 4)]["2 GPUs"] == "CPU, gloo"
        and rows[("ch09_moe", 4)]["8 GPUs"] == "GPU, NCCL"
    )
    assert [rows[("LowLevelZero", 2)][f] for f in ("0 GPUs", "1 GPU", "2 GPUs")] == [
        "recorded",
        "recorded",
        "live, GPU",
    ]


def test_every_notebook_prints_its_table_at_the_top():
    for path in sorted(live.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):  # chapters; not the appendix
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"][:3]
        sources = ["".join(c["source"]) for c in cells]
        assert any("live.show(" in s or "live.rows(" in s for s in sources), path.name


def test_an_unknown_notebook_is_named():
    with pytest.raises(FileNotFoundError, match="the notebooks are"):
        live.launches("99_none")
