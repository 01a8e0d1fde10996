"""Execute notebooks in place so they are stored with fresh outputs (what nbval compares against).

    python -m helpers.notebook.store_outputs notebooks/01_dimensions.ipynb [...]

Runs each notebook from its own folder with the ``python3`` kernel, keeps widget state (so the
book can render widgets offline) and stops at the first failing cell. Use it on a CPU machine:
the stored outputs are the CPU path's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def store(path: Path, timeout_s: int = 900) -> float:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    os.environ.pop("MPLBACKEND", None)  # an inherited Agg backend drops every figure
    NotebookClient(
        nb,
        timeout=timeout_s,
        kernel_name="python3",
        store_widget_state=True,
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    nbformat.write(nb, path)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("notebooks", nargs="+", type=Path)
    for path in parser.parse_args().notebooks:
        if not path.exists():
            sys.exit(f"no such notebook: {path}")
        print(f"{path}: executed and stored in {store(path):.0f} s", flush=True)


if __name__ == "__main__":
    main()
