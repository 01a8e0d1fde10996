"""Comparing the weights of two runs: a digest of a state dict, a checkpoint's whole tensors, the
largest difference.

Used by Chapter 5 (a resumed run's weights equal the uninterrupted run's, bit for bit; a
resharded one's are close) on checkpoints written by :mod:`helpers.train.checkpoint`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch


def params_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes: equal digests = bitwise-equal
    weights."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def full_weights(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The model weights of a checkpoint from :func:`helpers.train.checkpoint.save`, whole tensors
    on the CPU.

    Unsharded: ``model.pt``. Sharded (Colossal-AI's index + shard files, one set per pipeline
    stage): every file the index's ``weight_map`` names; the hybrid plugin gathers tensor-parallel
    pieces before writing, so the tensors are whole either way."""
    path = Path(path)
    if (path / "model.pt").is_file():
        return torch.load(path / "model.pt", map_location="cpu", weights_only=True)
    index = next((path / "model").glob("*.index.json"), None)
    if index is None:
        raise FileNotFoundError(
            f"{path} holds neither model.pt nor a sharded model/ folder with an index"
        )
    state: dict[str, torch.Tensor] = {}
    for name in sorted(set(json.loads(index.read_text())["weight_map"].values())):
        if name.endswith(".safetensors"):
            from safetensors.torch import load_file

            state.update(load_file(path / "model" / name))
        else:
            state.update(torch.load(path / "model" / name, map_location="cpu", weights_only=True))
    return state


def max_param_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest |a - b| over every parameter of two state dicts (they must have the same keys)."""
    if a.keys() != b.keys():
        raise KeyError(f"different parameters: {sorted(a.keys() ^ b.keys())[:5]}")
    return max(
        float((a[k].double() - b[k].double()).abs().max()) if a[k].numel() else 0.0 for k in a
    )


def compare_final_weights(a: str | Path, b: str | Path) -> dict:
    """Two checkpoints' weights: tensors compared, max |difference|, and whether the digests
    match."""
    sa, sb = full_weights(a), full_weights(b)
    return {
        "tensors": len(sa),
        "parameters": sum(t.numel() for t in sa.values()),
        "max_abs_diff": max_param_diff(sa, sb),
        "same_digest": params_digest(sa) == params_digest(sb),
    }
