"""Chapter 9, "The legacy `config.py` and its Booster equivalent": the legacy launcher.

What ``colossalai.legacy.initialize.launch`` says of a master address; used by
``notebooks/09_quick_demos.ipynb`` (the seed's sequence-parallel tutorial starts with it).
"""

from __future__ import annotations

import socket
import subprocess
import sys


_LEGACY = """
import sys, warnings
warnings.simplefilter("ignore")
from colossalai.legacy.initialize import launch
config = dict(parallel=dict(pipeline=1, tensor=dict(size=1, mode="sequence")))
try:
    launch(
        config=config,
        rank=0,
        world_size=1,
        host=sys.argv[1],
        port=int(sys.argv[2]),
        backend="gloo",
        verbose=False,
    )
    print("initialised")
except Exception as e:
    print(f"{type(e).__name__}: {e}")
"""


def legacy_launch(host: str, timeout_s: float = 120) -> str:
    """What ``colossalai.legacy.initialize.launch`` (the legacy engine's launcher, which the seed's
    sequence-parallel tutorial uses) says when the master address is ``host``: one process, gloo.
    Within ``make test`` it runs once per host (:func:`helpers.run.shared.once`)."""
    from helpers.run.shared import once

    return once(f"legacy_launch:{host}", lambda: {"said": _said(host, timeout_s)})["said"]


def _said(host: str, timeout_s: float) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run(
        [sys.executable, "-c", _LEGACY, host, str(port)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    lines = out.stdout.strip().splitlines()
    return lines[-1] if lines else out.stderr.strip().splitlines()[-1]
