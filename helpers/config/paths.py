"""The checkpoint folder of a config, expanded and checked before any rank starts (Chapter 4,
"What the loader guarantees").

The training loop opens ``Path(train.checkpoint_dir)`` as written (:mod:`helpers.train.loop`):
``pathlib`` expands neither ``~`` nor ``$VAR``, so ``~/runs/x`` would become a folder named ``~``
in the working directory. :func:`checkpoint_dir` therefore

* expands ``~`` and ``~user`` (``os.path.expanduser``) and ``$VAR`` / ``${VAR}``
  (``os.path.expandvars``), and refuses what stays unexpanded (an unknown user, an unset
  variable, which ``os.path.expandvars`` leaves as it is);
* leaves a relative path relative: it is resolved against the working directory of the process
  that trains, the repository root under the book's launcher (:mod:`helpers.run.launch` starts
  ``torchrun`` there), and it is checked against the working directory of the process that loads
  the config;
* refuses a folder that is a file, a folder that cannot be created or written (the nearest
  existing parent decides: ``os.access`` with write and search permission), a name longer than
  the file system allows (``os.pathconf``'s ``PC_NAME_MAX`` / ``PC_PATH_MAX``), a NUL character,
  and a checkpoint itself (``step_00000006``) instead of the folder that holds them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from helpers.parallel.errors import fail

FIELD = "train.checkpoint_dir"
_UNEXPANDED = re.compile(r"\$(\w+|\{[^}]*\})")
_STEP = re.compile(r"^step_\d{8}$")  # helpers.train.checkpoint.STEP_DIR


def _limit(folder: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):
        return default


def checkpoint_dir(value: str) -> str:
    """``value`` with ``~`` and ``$VAR`` expanded, after the checks of the module notes."""
    if "\x00" in value:
        raise fail(FIELD, value, "holds a NUL character, which no file system allows", "remove it")
    expanded = os.path.expandvars(os.path.expanduser(value))
    if expanded.startswith("~"):
        user = expanded[1:].split("/", 1)[0]
        raise fail(FIELD, value, f"~{user} is not a user of this machine", "write the full path")
    if missing := _UNEXPANDED.search(expanded):
        name = missing.group(1).strip("{}")
        raise fail(
            FIELD,
            value,
            f"the environment variable {name} is not set, and the folder would be named "
            f"{missing.group(0)!r} literally",
            f"set {name} before loading the config, or write the path",
        )
    path = Path(expanded)
    if _STEP.match(path.name):
        raise fail(
            FIELD,
            value,
            f"{path.name} is one checkpoint (helpers.train.checkpoint names them step_ and 8 "
            "digits); checkpoint_dir is the folder that holds them",
            f"write checkpoint_dir: {path.parent}",
        )
    if path.is_file():
        raise fail(FIELD, value, "is a file, not a folder", "name a folder, e.g. ckpt/run1")
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise fail(
            FIELD, value, f"{parent} is a file, so no folder can be made under it", "name a folder"
        )
    name_max = _limit(parent, "PC_NAME_MAX", 255)
    if any(len(os.fsencode(part)) > name_max for part in path.parts):
        raise fail(FIELD, value, f"a name is longer than {name_max} bytes", "use shorter names")
    if len(os.fsencode(os.path.abspath(path))) >= _limit(parent, "PC_PATH_MAX", 4096):
        raise fail(FIELD, value, "the path is longer than the file system allows", "shorten it")
    if not os.access(parent, os.W_OK | os.X_OK):
        made = "written" if parent == path else f"created ({parent} is not writable)"
        where = "" if path.is_absolute() else f" (relative to {os.getcwd()})"
        raise fail(
            FIELD,
            value,
            f"cannot be {made}{where}",
            "choose a folder you can write, or change its permissions",
        )
    return expanded
