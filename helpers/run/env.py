"""The distributed environment inside one rank: backend and device chosen together.

Used by every demo in ``helpers/demos`` (all chapters). A demo is started by torchrun, which
sets RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE; :func:`distributed` reads them, picks

* NCCL on ``cuda:LOCAL_RANK`` when this node has at least LOCAL_WORLD_SIZE CUDA GPUs,
* gloo on the CPU otherwise (:func:`rule` is the launcher's only one),

initialises the default process group and always tears it down, even when the demo raises.
Results leave a rank through :func:`emit`, one ``RESULT {json}`` line that
:mod:`helpers.run.launch` collects and sorts by rank; a long result leaves as numbered
``RESULT-PART`` lines, each short enough to pass torchrun's output pipe in one piece
(Chapter 5, "The notebook's launcher"), and :func:`results_of` joins them again
(:func:`losses_from_lines` reads the per-step losses among them, also of a killed run).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterator

import torch
import torch.distributed as dist

RESULT_PREFIX = "RESULT "
# ``RESULT-PART <rank> <i>/<n> <text>``: part i of n of one result's JSON. torchrun copies every
# rank's lines into one pipe from a thread per rank; a write of more than PIPE_BUF bytes (4096 on
# Linux, POSIX's minimum is 512) may be split by another thread's write, so a line stays below it.
PART_PREFIX = "RESULT-PART "
PART_CHARS = 3000  # JSON characters per line (ASCII: json.dumps escapes the rest)


@dataclass(frozen=True)
class DistEnv:
    """What a rank knows about itself once the process group is up."""

    rank: int
    world_size: int
    local_rank: int
    backend: str  # "nccl" or "gloo"
    device: torch.device

    @property
    def is_gpu(self) -> bool:
        return self.device.type == "cuda"


def gpu_count() -> int:
    """Number of usable CUDA GPUs on this machine (0 on a CPU-only build)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def rule(nproc: int, gpus: int) -> str:
    """The launcher's one rule: where ``nproc`` local ranks run on a machine with ``gpus`` GPUs.

    * ``nproc <= gpus``: every rank gets its own GPU and NCCL (``"gpu"``);
    * ``nproc > gpus``: every rank runs on the CPU with gloo (``"cpu"``), and
      :func:`placement_env` hides CUDA from the ranks, so no library (Colossal-AI's accelerator,
      ``torch.cuda.is_available()``) can put a model on a GPU that the batches never reach.

    A demo never decides this itself (Chapter 1, "Where the ranks run").
    """
    # [start: device-rule]
    if nproc < 1:
        raise ValueError(f"nproc must be at least 1, got {nproc}")
    return "gpu" if nproc <= gpus else "cpu"
    # [end: device-rule]


def placement(nproc: int, gpus: int | None = None, force: str | None = None) -> str:
    """:func:`rule` on this machine, unless ``force`` (or ``BOOK_BACKEND=gloo|nccl``) overrides it:
    gloo runs a GPU box's demo on its CPUs; nccl fails loudly when there are too few GPUs."""
    force = force or os.environ.get("BOOK_BACKEND") or None
    if force not in (None, "gloo", "nccl"):
        raise ValueError(f"BOOK_BACKEND must be 'gloo' or 'nccl', not {force!r}")
    gpus = gpu_count() if gpus is None else gpus
    if force == "nccl" and nproc > gpus:
        raise RuntimeError(f"NCCL needs one GPU per local rank: {nproc} ranks but {gpus} GPUs")
    return "cpu" if force == "gloo" else rule(nproc, gpus)


def placement_env(nproc: int, gpus: int | None = None, force: str | None = None) -> dict[str, str]:
    """The environment the launcher gives every rank, following :func:`placement`."""
    if placement(nproc, gpus, force) == "cpu":
        return {"BOOK_BACKEND": "gloo", "CUDA_VISIBLE_DEVICES": ""}
    return {"BOOK_BACKEND": "nccl"}


def choose_backend(
    local_world_size: int, local_rank: int = 0, force: str | None = None
) -> tuple[str, torch.device]:
    """Backend and device inside a rank, chosen together so they can never disagree.

    NCCL only works on CUDA tensors and gloo is the CPU backend: picking them separately is how
    "NCCL on CPU tensors" errors happen. The rule is :func:`placement`'s; under the launcher the
    ranks receive its decision in ``BOOK_BACKEND`` (and, for the CPU, CUDA hidden).
    """
    if placement(local_world_size, force=force) == "gpu":
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def _env_int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise RuntimeError(
                f"{name} is not set: start this module with torchrun "
                f"(python -m torch.distributed.run --nproc_per_node N -m ...)"
            )
        return default
    return int(value)


@contextlib.contextmanager
def distributed(backend: str | None = None, timeout_s: float = 120.0) -> Iterator[DistEnv]:
    """Initialise the default process group for this rank and always destroy it.

    Works under torchrun and, for a single process, under plain ``python`` (it then acts as
    rank 0 of a world of 1 on a free local port). The teardown runs ``gc.collect()`` before the
    last barrier, which avoids the DDP-reducer-versus-gloo hang at interpreter exit (measured on the
    CPU: 5 hangs in 22 runs without it, 0 in 20 with it).
    """
    if "RANK" not in os.environ:  # plain `python -m ...`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
    rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world_size = _env_int("LOCAL_WORLD_SIZE", world_size)
    chosen, device = choose_backend(local_world_size, local_rank, backend)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        chosen,
        timeout=timedelta(seconds=timeout_s),
        **({"device_id": device} if device.type == "cuda" else {}),
    )
    try:
        yield DistEnv(rank, world_size, local_rank, chosen, device)
        gc.collect()
        dist.barrier()
    finally:
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deterministic() -> None:
    """Make this rank's kernels bitwise repeatable, on the GPU as on the CPU.

    Chapter 9's kill-and-resume compares losses with ``==``. On the GPU that needs cuBLAS's fixed
    workspace (``CUBLAS_WORKSPACE_CONFIG``, read when the first cuBLAS handle is made), cuDNN's
    deterministic convolutions without autotuning, and ``torch.use_deterministic_algorithms``,
    which raises on any op that has no deterministic kernel instead of silently varying.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False


def sync(device: torch.device) -> None:
    """Wait for queued GPU work (for timing); a no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def say(*parts: object) -> None:
    """Print one whole line at once, so lines of different ranks never interleave mid-line."""
    sys.stdout.write(" ".join(str(p) for p in parts) + "\n")
    sys.stdout.flush()


def emit(result_type: type | None = None, /, **result: object) -> None:
    """Send a result to the launcher tagged with this rank: one ``RESULT {json}`` line, or
    numbered ``RESULT-PART`` lines of at most :data:`PART_CHARS` characters of JSON each.

    ``result_type``: the result's TypedDict (:mod:`helpers.run.result_types`, which every demo
    passes); the keys are checked against it first, so a renamed key fails where it is emitted."""
    rank = int(os.environ.get("RANK", "0"))
    if result_type is not None:
        check_keys(result_type, {"rank": rank, **result})
    text = json.dumps({"rank": rank, **result}, sort_keys=True)
    if len(text) <= PART_CHARS:
        say(RESULT_PREFIX + text)
        return
    parts = [text[i : i + PART_CHARS] for i in range(0, len(text), PART_CHARS)]
    for i, part in enumerate(parts, 1):
        say(f"{PART_PREFIX}{rank} {i}/{len(parts)} {part}")


def check_keys(result_type: type, result: dict) -> None:
    """Raise a ``KeyError`` naming the demo's type and the key when ``result`` lacks a required key
    of the TypedDict ``result_type`` or has one it does not declare."""
    required = getattr(result_type, "__required_keys__", None)
    if required is None:
        raise TypeError(f"{result_type!r} is not a TypedDict of helpers.run.result_types")
    allowed = required | result_type.__optional_keys__
    name = f"{result_type.__module__}.{result_type.__qualname__}"
    missing, extra = sorted(required - set(result)), sorted(set(result) - allowed)
    if missing or extra:
        raise KeyError(
            f"{sys.argv[0]}: the result does not match {name}: "
            + "; ".join(
                [f"missing key {k!r}" for k in missing] + [f"undeclared key {k!r}" for k in extra]
            )
        )


def is_result(text: str) -> bool:
    """Whether an output line carries (part of) a result rather than something to show."""
    return text.startswith((RESULT_PREFIX, PART_PREFIX))


def results_of(lines: list[str]) -> list[dict]:
    """The results in output ``lines``, in the order they were completed: what :func:`emit`
    wrote, read back. Lines of several ranks may be mixed; a result whose parts did not all
    arrive in order (a rank killed while writing it) is left out."""
    found, open_parts = [], {}
    for text in lines:
        if text.startswith(RESULT_PREFIX):
            found.append(json.loads(text[len(RESULT_PREFIX) :]))
        elif text.startswith(PART_PREFIX):
            rank, count, part = text[len(PART_PREFIX) :].split(" ", 2)
            i, n = map(int, count.split("/"))
            got = open_parts.pop(rank, []) if i > 1 else []
            if len(got) == i - 1:
                got.append(part)
                if i < n:
                    open_parts[rank] = got
                else:
                    found.append(json.loads("".join(got)))
    return found


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest elementwise difference, as a float JSON can carry."""
    return float((a.detach().float().cpu() - b.detach().float().cpu()).abs().max())


def losses_from_lines(lines: list[str]) -> dict[int, float]:
    """{step: loss} from a rank's output lines (``RESULT {"step": k, "loss": x}``), also of a
    killed run."""
    return {r["step"]: r["loss"] for r in results_of(lines) if "step" in r and "loss" in r}
