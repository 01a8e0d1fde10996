"""How a recording's command is spelled: :data:`PROG`, and :func:`spelled_today` for a record
made before the recorders shared one command line (its provenance keeps the command that made it).
"""

from __future__ import annotations

PROG = "python -m helpers.record"

# The module each record's command ran before the recorders shared this command line; the records
# keep the command that made them (provenance), :func:`spelled_today` gives today's spelling.
_BEFORE = {
    "chapter01": "ch01",
    "multigpu": "ch02",
    "chapter03": "ch03",
    "chapter05_gpu": "ch05",
    "chapter07": "ch07",
    "chapter08": "ch08",
    "chapter09": "ch09",
    "flagship": "flagship",
}


def spelled_today(command: str) -> str:
    """A recorded command as it is typed today; a command already spelled so comes back unchanged.

    >>> spelled_today("python -m helpers.chapter09 --record --parts resnet,moe --gpus 1")
    'python -m helpers.record ch09 --record --only resnet moe --gpus 1'
    """
    words = command.split()
    if len(words) < 3 or words[:2] != ["python", "-m"]:
        return command
    name = _BEFORE.get(words[2].removeprefix("helpers."))
    if name is None or not words[2].startswith("helpers."):
        return command
    rest, out = words[3:], []
    for i, word in enumerate(rest):
        if word == "--parts" and i + 1 < len(rest):
            out.append("--only")
        elif i > 0 and rest[i - 1] == "--parts":
            out.extend(word.split(","))
        else:
            out.append(word)
    return " ".join([PROG, name, *out])
