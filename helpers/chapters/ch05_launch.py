"""Chapter 5 (launching and resuming): data, the checkpointed layout, and the notebook's
comparisons.

Inside a rank (``helpers.demos.ch05_train``, whose plugin comes from
:func:`helpers.config.plugin.build_plugin`): :class:`helpers.models.llama.ProgressionDataset` is the
data set whose position a checkpoint records, and :func:`layout_of` what the checkpoint says about
the layout (:func:`helpers.train.run_config.layout_of`). In
the notebook: :func:`rank_log` wraps a rank's lines to the page (:func:`command_text` a command),
:func:`losses_from_lines` reads the per-step losses a (possibly killed) run reported,
:func:`torchrun_failure` keeps the lines of torchrun's failure report that name the ranks,
:func:`compare_final_weights` compares two runs' last checkpoints tensor by tensor, and
:func:`hostfile_commands` spells out what ``colossalai run --hostfile`` starts on each node.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from helpers.run.env import is_result
from helpers.run.env import losses_from_lines as losses_from_lines
from helpers.train.run_config import layout_of as layout_of
from helpers.train.weights import compare_final_weights as compare_final_weights
from helpers.run.failure import LAUNCHER


# --- notebook side ---------------------------------------------------------------------------


def rank_log(lines: list[str], width: int = 100) -> str:
    """A rank's printed lines without its ``RESULT`` lines, each wrapped at ``width`` characters
    (the page's column) with the continuation indented."""
    wrapped = (
        textwrap.fill(line, width, subsequent_indent="    ", break_on_hyphens=False)
        for line in lines
        if not is_result(line)
    )
    return "\n".join(wrapped)


def command_text(command: str | list[str], width: int = 100) -> str:
    """A shell command as lines of at most ``width`` characters joined by ``\\`` continuations,
    so that it fits the page and still pastes into a shell."""
    words = command.split() if isinstance(command, str) else [str(w) for w in command]
    lines, line = [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width - 2:
            lines.append(line)
            line = "    " + word
        else:
            line = f"{line} {word}" if line else word
    return " \\\n".join([*lines, line])


def torchrun_failure(err) -> str:
    """Section 5 (kill a rank): the lines of torchrun's failure report in a
    :class:`helpers.run.launch.LaunchError` (its ``lines`` of the launcher) that say which rank
    failed first and how each one ended: the ``Failures`` and ``Root Cause`` headings and their
    ``rank`` and ``exitcode`` fields."""
    return "\n".join(
        line
        for line in err.lines[LAUNCHER]
        if re.match(r"\s*(Failures|Root Cause|rank|exitcode)\b", line)
    )


def read_hostfile(hostfile: str | Path) -> list[str]:
    """Host names as Colossal-AI 0.5.0's ``fetch_hostfile`` reads them: one per non-empty line, no
    ``slots=`` and no comments, duplicates rejected. (It also resolves every name with
    ``getaddrinfo`` to spot the local host, so each must resolve on the launching machine; this
    reader skips that step so the book's example names need not exist.)"""
    hosts = [line.strip() for line in Path(hostfile).read_text().splitlines() if line.strip()]
    dup = sorted({h for h in hosts if hosts.count(h) > 1})
    if dup:
        raise ValueError(f"duplicate host(s) in the hostfile: {dup}")
    return hosts


def hostfile_commands(
    hostfile: str | Path,
    nproc_per_node: int,
    module: str,
    args: list[str] = (),
    master_port: int = 29500,
) -> list[tuple[str, str]]:
    """(host, command) pairs: what
    ``colossalai run --hostfile FILE --nproc_per_node N -m MODULE ARGS`` runs on each host, built
    by Colossal-AI's own ``get_launch_command`` (0.5.0).

    With more than one host the first becomes ``--master_addr``; node ranks follow the file's
    order. The launcher runs each command over ssh (fabric) in the current directory, after
    exporting the caller's whole environment on that host.
    """
    from colossalai.cli.launcher.run import get_launch_command

    hosts = read_hostfile(hostfile)
    master = hosts[0] if len(hosts) > 1 else "127.0.0.1"
    return [
        (
            host,
            get_launch_command(
                master_addr=master,
                master_port=master_port,
                nproc_per_node=nproc_per_node,
                user_script=module,
                user_args=list(args),
                node_rank=rank,
                num_nodes=len(hosts),
                run_as_module=True,
            ),
        )
        for rank, host in enumerate(hosts)
    ]
