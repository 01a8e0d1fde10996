"""What one rank holds in memory, by kind: parameters, optimizer state, Gemini chunks, leftovers.

Used by Chapter 7's measured demo (``helpers/demos/ch07_memory.py``) to report, next to the
allocator's numbers, which tensors exist — the evidence a memory model is checked against. Each
storage is counted once (``untyped_storage().nbytes()``), so views and shared buffers are not
counted twice. On the CPU, where no allocator statistics exist, :func:`count_saved_bytes` and
:func:`tracked_peak` measure what autograd saves and the peak of a step, the exact checks of
Chapter 7's activation and phase model (:mod:`helpers.cost.memory_llama`).
"""

from __future__ import annotations

import torch


def tensor_bytes(tensors) -> dict:
    """Bytes of distinct storages among ``tensors``, by device type."""
    seen, out = set(), {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            key = (t.device.type, t.untyped_storage().data_ptr())
            if key not in seen:
                seen.add(key)
                out[t.device.type] = out.get(t.device.type, 0) + t.untyped_storage().nbytes()
    return out


def optimizer_census(opt, model) -> dict:
    """What the inner optimizer holds: state tensors and the parameters it updates (masters)."""
    inner = getattr(opt, "optim", opt)
    states = [v for s in inner.state.values() for v in s.values()]
    masters = [p for g in inner.param_groups for p in g["params"]]
    census = {
        "optimizer_states": tensor_bytes(states),
        "optimizer_params": tensor_bytes(masters),
        "model_params": tensor_bytes(list(model.parameters())),
    }
    manager = getattr(model, "chunk_manager", None)  # GeminiDDP is the boosted model itself
    if manager is not None:  # Gemini: chunk sizes as its search chose them (informational)
        chunks = [c for group in manager.chunk_groups.values() for c in group]
        # int(): the chunk search computes sizes with numpy, and json cannot write numpy integers
        census["chunks"] = {
            "sizes": [int(c.chunk_size) for c in chunks],
            "used": [int(c.utilized_size) for c in chunks],
            "keep_gathered": [bool(c.keep_gathered) for c in chunks],
            "total_mem": {k: int(v) for k, v in manager.total_mem.items()},
        }
    return census


def leftover_tensors(opt, model, top: int = 12) -> list[dict]:
    """CUDA tensors alive after warm-up that are neither parameters nor optimizer state/masters,
    grouped by (shape, dtype), largest first: what a model of the persistent memory may have
    missed."""
    import gc
    import warnings

    inner = getattr(opt, "optim", opt)
    known = {
        t.untyped_storage().data_ptr()
        for t in list(model.parameters())
        + [v for s in inner.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
        + [p for g in inner.param_groups for p in g["params"]]
        if t.device.type == "cuda" and t.numel()
    }
    groups: dict = {}
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # isinstance() on deprecated torch objects warns
        objects = gc.get_objects()
        tensors = [o for o in objects if isinstance(o, torch.Tensor)]
    for obj in tensors:
        try:
            if obj.device.type != "cuda" or not obj.numel():
                continue
            ptr = obj.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 - some objects refuse inspection
            continue
        if ptr in known or ptr in seen:
            continue
        seen.add(ptr)
        key = (str(tuple(obj.shape)), str(obj.dtype))
        entry = groups.setdefault(key, {"shape": key[0], "dtype": key[1], "count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += obj.untyped_storage().nbytes()
    return sorted(groups.values(), key=lambda e: -e["bytes"])[:top]


def count_saved_bytes(model, batch: dict) -> dict:
    """Bytes autograd saves in one forward of ``model`` on ``batch``, parameters excluded, each
    storage counted once (``torch.autograd.graph.saved_tensors_hooks``); the exact check of
    :func:`helpers.cost.memory_llama.layer_activation_bytes` on the CPU."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen.setdefault(ptr, t.untyped_storage().nbytes())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(**batch).loss
    loss.backward()
    return {"total": sum(seen.values()), "tensors": len(seen)}


def tracked_peak(model, batch: dict, optimizer=None) -> dict:
    """Peak bytes by kind over one forward and backward (and ``optimizer.step()`` if given), on any
    device, from PyTorch's ``torch.distributed._tools.mem_tracker.MemTracker`` (it follows every
    tensor's storage): the CPU check of the phase model, where no allocator statistics exist."""
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(model, *([optimizer] if optimizer is not None else []))
    with tracker:
        loss = model(**batch).loss
        loss.backward()
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad()
    peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    return {str(kind).split(".")[-1].lower(): value for kind, value in peak.items()}
