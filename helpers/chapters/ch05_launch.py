"""Chapter 5 (launching and resuming): data, the checkpointed layout, and the notebook's
comparisons.

Inside a rank (``helpers.demos.ch05_train``, whose plugin comes from
:func:`helpers.config.plugin.build_plugin`): :class:`ProgressionDataset` is the data set whose
position a checkpoint records, and :func:`layout_of` what the checkpoint says about the layout. In
the notebook: :func:`losses_from_lines` reads the per-step losses a (possibly killed) run reported,
:func:`torchrun_failure` keeps the lines of torchrun's failure report that name the ranks,
:func:`compare_final_weights` compares two runs' last checkpoints tensor by tensor, and
:func:`hostfile_commands` spells out what ``colossalai run --hostfile`` starts on each node.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch.utils.data import Dataset

from helpers.run.env import results_of
from helpers.run.failure import LAUNCHER


class ProgressionDataset(Dataset):
    """``size`` fixed sequences (arithmetic progressions mod vocab,
    :func:`helpers.models.llama.token_batch`).

    A fixed, finite data set, so that a run passes through epochs and its position in the data
    (epoch, batch within the epoch) is something a checkpoint has to record.
    """

    def __init__(self, size: int, seq_len: int, vocab: int, seed: int = 0):
        from helpers.models.llama import token_batch

        self.ids = token_batch(0, size, seq_len, vocab, seed=seed + 1)["input_ids"]  # (size, seq)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def layout_of(cfg, world_size: int) -> dict:
    """What a checkpoint records and a resume must match for the run to continue bit for bit."""
    p, t = cfg.parallelism, cfg.train
    return {
        "world_size": world_size,
        "data": cfg.data_degree,
        "tensor": p.tensor,
        "pipeline": p.pipeline,
        "sequence": p.sequence,
        "batch_size": t.batch_size,
        "micro_batch": cfg.micro_batch,
        "seed": t.seed,
    }


# --- notebook side ---------------------------------------------------------------------------


def losses_from_lines(lines: list[str]) -> dict[int, float]:
    """{step: loss} from a rank's output lines (``RESULT {"step": k, "loss": x}``), also of a
    killed run."""
    return {r["step"]: r["loss"] for r in results_of(lines) if "step" in r and "loss" in r}


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


def compare_final_weights(a: str | Path, b: str | Path) -> dict:
    """Two checkpoints' weights: tensors compared, max |difference|, and whether the digests
    match."""
    from helpers.train.weights import full_weights, max_param_diff, params_digest

    sa, sb = full_weights(a), full_weights(b)
    return {
        "tensors": len(sa),
        "parameters": sum(t.numel() for t in sa.values()),
        "max_abs_diff": max_param_diff(sa, sb),
        "same_digest": params_digest(sa) == params_digest(sb),
    }


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
