"""Every GPU and CPU record the book shows, with its provenance: the appendix's index.

Each file under ``results/<hardware>/`` was written by the project's code on the machine its folder
names; :func:`index_rows` reads them all and gives one row per record (hardware, date, versions,
the command that made it as it is typed today, the commit), for the appendix "How this book was
measured".
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers.record.commands import spelled_today
from helpers.record.results import RESULTS_DIR


def index_rows(results_dir: Path = RESULTS_DIR) -> list[dict]:
    """One row per record file, sorted by hardware folder then name."""
    rows = []
    for path in sorted(results_dir.glob("*/*.json")):
        p = json.loads(path.read_text()).get("provenance", {})
        versions = p.get("versions", {})
        rows.append(
            {
                "record": path.stem,
                "hardware": path.parent.name,
                "date": p.get("date", "?")[:10],
                "torch": versions.get("torch", "?"),
                "Colossal-AI": versions.get("colossalai", "?"),
                "command (as typed today)": spelled_today(p.get("command", "?")),
                "commit": p.get("git_commit", "?")[:10] + (" +" if p.get("git_dirty") else ""),
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """Counts the appendix quotes: records, hardware folders, first and last recording date."""
    dates = sorted(r["date"] for r in rows)
    return {
        "records": len(rows),
        "folders": len({r["hardware"] for r in rows}),
        "first": dates[0],
        "last": dates[-1],
    }
