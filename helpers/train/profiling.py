"""Compute versus communication per rank, from the PyTorch profiler (Chapter 8's tuning runs).

``breakdown(prof, device, steps)`` reads the events of a ``torch.profiler.profile`` run and sums,
per step, the time the device spent in compute kernels, in communication kernels, and in
communication that no compute kernel overlapped (exposed). Intervals are merged before they are
summed, so nested or concurrent events are counted once. On GPUs the kernels are CUDA events and
communication kernels are NCCL's (names start with ``nccl``); on the CPU (gloo) the collectives are
the ``gloo:*`` / ``c10d::*`` operators and compute is every other ``aten::`` operator: a rough
picture, since a CPU rank computes and waits on the same cores.

Communication share (the seed's 通信占比) = comm / (comm + compute), with each side's merged time.

``kernel_classes`` answers the flagship run's other question, *which* compute is slow: device time
per step by kind of kernel (matrix multiplies, attention, Triton kernels from ``torch.compile``,
cross-entropy, the optimizer, copies and casts, other elementwise) and the longest kernels.
"""

from __future__ import annotations

_COMM_WORDS = (
    "nccl",
    "gloo",
    "c10d::",
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "broadcast",
    "all_to_all",
    "alltoall",
    "sendrecv",
)


def is_comm(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in _COMM_WORDS)


# [start: split]
def merged_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by ``intervals`` (each (start, end)), overlaps counted once."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def split(events: list[tuple[str, float, float]]) -> dict:
    """{compute_us, comm_us, exposed_comm_us, comm_share} from (name, start_us, end_us) events."""
    comm = [(a, b) for n, a, b in events if is_comm(n)]
    compute = [(a, b) for n, a, b in events if not is_comm(n)]
    t_comm, t_compute = merged_length(comm), merged_length(compute)
    exposed = merged_length(comm + compute) - t_compute
    share = t_comm / (t_comm + t_compute) if t_comm + t_compute else 0.0
    return {
        "compute_us": t_compute,
        "comm_us": t_comm,
        "exposed_comm_us": exposed,
        "comm_share": share,
    }


# [end: split]


def device_events(prof, device: str, annotations: bool = True) -> list[tuple[str, float, float]]:
    """(name, start, end) in µs of the kernels (cuda) or the aten/c10d operators (cpu) of a
    profile.

    On CUDA, Kineto also records each ``record_function`` range that launched GPU work as a range
    on the GPU (a user annotation, e.g. FSDP2's ``FSDP::...`` labels); ``annotations=False``
    leaves those out, so that only kernels remain (:mod:`helpers.train.trace`)."""
    from torch.autograd import DeviceType

    out = []
    for e in prof.events():
        if not annotations and getattr(e, "is_user_annotation", False):
            continue
        if device == "cuda" and e.device_type == DeviceType.CUDA:
            out.append((e.name, e.time_range.start, e.time_range.end))
        elif (
            device == "cpu"
            and e.device_type == DeviceType.CPU
            and (e.name.startswith("aten::") or is_comm(e.name))
        ):
            out.append((e.name, e.time_range.start, e.time_range.end))
    return out


def breakdown(prof, device: str, steps: int) -> dict:
    """Per-step milliseconds of compute, communication and exposed communication, and the share."""
    events = device_events(prof, device)
    parts = split(events)
    out = {
        k.replace("_us", "_ms"): round(v / 1000 / steps, 3)
        for k, v in parts.items()
        if k.endswith("_us")
    }
    out["comm_share"] = round(parts["comm_share"], 4)
    out["device"] = device
    out["kernels"] = kernel_classes(events, steps)
    return out


# (class, words in the kernel's name); the first match wins, "elementwise/other" is the rest
KERNEL_CLASSES = (
    ("communication", _COMM_WORDS),
    ("attention", ("flash", "fmha", "attention", "attn")),
    (
        "matmul",
        (
            "gemm",
            "cutlass",
            "xmma",
            "nvjet",
            "cublas",
            "aten::mm",
            "aten::addmm",
            "aten::bmm",
            "matmul",
        ),
    ),
    ("triton (compiled)", ("triton",)),
    ("cross-entropy", ("log_softmax", "nll_loss", "cross_entropy", "softmax")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("copy/cast", ("copy", "memcpy", "memset", "cast", "fill")),
)
# the kernel classes as a table's columns, in the order the book shows them
KERNEL_COLUMNS = (
    "matmul",
    "attention",
    "triton (compiled)",
    "copy/cast",
    "cross-entropy",
    "elementwise/other",
    "optimizer",
    "communication",
)


def kernel_class(name: str) -> str:
    low = name.lower()
    return next(
        (c for c, words in KERNEL_CLASSES if any(w in low for w in words)), "elementwise/other"
    )


def kernel_classes(events: list[tuple[str, float, float]], steps: int, top: int = 5) -> dict:
    """{'ms': {class: ms per step}, 'top': [[name, ms per step], ...]} from (name, start_us,
    end_us) events.

    Kernel durations are summed, not merged: on one stream compute kernels run one after another."""
    per_class: dict[str, float] = {}
    per_name: dict[str, float] = {}
    for name, a, b in events:
        per_class[kernel_class(name)] = per_class.get(kernel_class(name), 0.0) + (b - a)
        per_name[name] = per_name.get(name, 0.0) + (b - a)
    longest = sorted(per_name.items(), key=lambda kv: -kv[1])[:top]
    return {
        "ms": {
            c: round(v / 1000 / steps, 3)
            for c, v in sorted(per_class.items(), key=lambda kv: -kv[1])
        },
        "top": [[n[:90], round(v / 1000 / steps, 3)] for n, v in longest],
    }
