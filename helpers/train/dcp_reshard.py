"""Chapter 5, "Changing the layout on resume": PyTorch's distributed checkpoint (DCP) on CPU ranks.

Used by :mod:`helpers.demos.ch05_dcp`. The tiny Llama (:mod:`helpers.models.llama`) is split by a
named layout of :data:`LAYOUTS`: tensor parallel over the ``tp`` axis of a 2-D ``DeviceMesh``
(torch's ``ColwiseParallel`` for q, k, v, gate and up, ``RowwiseParallel`` for o and down: the
Megatron split of Chapter 1), then FSDP2's ``fully_shard`` over the ``dp`` axis. Every parameter
keeps its name (its FQN), whatever the layout; only its ``DTensor`` placements change.

DCP writes each rank's shards with their global offsets (``.metadata`` lists, per tensor, every
saved chunk and the file that holds it), and a load asks for the chunks of the *new* layout: each
rank reads exactly the saved bytes that overlap its new shards
(``torch/distributed/checkpoint/planner_helpers.py``, ``create_read_items_for_chunk_list``, called
by ``default_planner.py``'s ``create_default_local_load_plan``). That is the whole of resharding.
:func:`state` and :func:`restore` wrap ``get_state_dict`` and ``set_state_dict``
(``torch/distributed/checkpoint/state_dict.py``), which turn the model's and AdamW's states into
name-keyed dicts of ``DTensor`` shards and back.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from helpers.models.llama import build_llama, llama_config, shard_batch, token_batch

# name -> (D, T): FSDP2 over D ranks, tensor parallel over T ranks (D·T ranks in all)
LAYOUTS = {"dp2xtp2": (2, 2), "fsdp4": (4, 1), "fsdp2": (2, 1), "tp2": (1, 2), "single": (1, 1)}
# |resumed loss - uninterrupted loss| allowed, fp32 (the module notes of helpers.demos.ch05_dcp)
TOLERANCE = 1e-4
# the tiny Llama of the demo: small enough for four ranks on two cores
SHAPE = dict(layers=2, hidden=64, heads=4, vocab=128)
BATCH, SEQ, LR = 8, 32, 3e-3


def tp_plan() -> dict:
    """Megatron's split of one decoder layer, in torch's tensor-parallel styles."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    # [start: tp-plan]
    col, row = ColwiseParallel(), RowwiseParallel()
    return {
        "self_attn.q_proj": col,
        "self_attn.k_proj": col,
        "self_attn.v_proj": col,
        "self_attn.o_proj": row,  # heads split over T: each rank attends with H/T heads
        "mlp.gate_proj": col,
        "mlp.up_proj": col,
        "mlp.down_proj": row,  # the one all-reduce of the MLP
    }
    # [end: tp-plan]


def mesh_of(layout: str):
    """The 2-D ``DeviceMesh`` ("dp", "tp") of a layout; its size must be the world size."""
    from torch.distributed.device_mesh import init_device_mesh

    d, t = LAYOUTS[layout]
    if d * t != dist.get_world_size():
        raise ValueError(f"{layout} needs {d * t} ranks, not {dist.get_world_size()}")
    return init_device_mesh("cpu", (d, t), mesh_dim_names=("dp", "tp"))


# [start: build]
def build(layout: str, hidden: int = SHAPE["hidden"], layers: int = SHAPE["layers"]):
    """(model, AdamW, mesh) of ``layout``: the same seeded weights, then TP, then FSDP2."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = mesh_of(layout)
    d, t = LAYOUTS[layout]
    cfg = llama_config(**{**SHAPE, "hidden": hidden, "layers": layers})
    model = build_llama(cfg, seed=0)
    if t > 1:
        for layer in model.model.layers:
            parallelize_module(layer, mesh["tp"], tp_plan())
    if d > 1:
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    return model, torch.optim.AdamW(model.parameters(), lr=LR), mesh
    # [end: build]


def train(model, opt, mesh, steps: range) -> list[float]:
    """One AdamW step per global batch ``k`` of ``steps``; the global mean loss of each.

    Every layout trains on the same global batches (:func:`helpers.models.llama.token_batch`): a
    data-parallel rank takes rows ``r_D::D``, the T ranks of one tensor-parallel group the same
    rows."""
    d, r = mesh["dp"].size(), mesh["dp"].get_local_rank()
    losses = []
    for k in steps:
        batch = shard_batch(token_batch(k, BATCH, SEQ, SHAPE["vocab"]), r, d)
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)  # T copies of each of the D equal-sized means
        losses.append(float(mean) / dist.get_world_size())
    return losses


# [start: state]
def state(model, opt) -> dict:
    """Model and optimizer as name-keyed dicts of this rank's DTensor shards (no copy)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, opt)
    return {"model": model_sd, "optim": optim_sd}


def restore(model, opt, path: str, optimizer: bool = True) -> None:
    """Read a checkpoint of any layout into this one: DCP fills the shards ``state`` describes."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_state_dict

    sd = state(model, opt)
    if not optimizer:  # the control: weights only, AdamW's m, v and step start again
        dcp.load({"model": sd["model"]}, checkpoint_id=path)
        set_model_state_dict(model, sd["model"])
        return
    dcp.load(sd, checkpoint_id=path)  # reads the overlap of saved and wanted chunks
    set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    # [end: state]


def timed_save(model, opt, path: str, group) -> float:
    """Seconds the caller is blocked by a synchronous ``dcp.save``."""
    import torch.distributed.checkpoint as dcp

    dist.barrier(group=group)
    t0 = time.perf_counter()
    dcp.save(state(model, opt), checkpoint_id=path, process_group=group)
    return time.perf_counter() - t0


# [start: async]
def start_async_save(model, opt, path: str, group) -> tuple[object, float, float]:
    """``dcp.async_save``: (its future, seconds until it returned, when it started).

    It copies this rank's state into fresh CPU memory (the staging) before it returns, then plans
    and writes from a thread of its own, whose collectives go over ``group``: a gloo group of
    their own, so that they never interleave with the training's on the default group."""
    import torch.distributed.checkpoint as dcp

    dist.barrier(group=group)
    t0 = time.perf_counter()
    future = dcp.async_save(state(model, opt), checkpoint_id=path, process_group=group)
    return future, time.perf_counter() - t0, t0
    # [end: async]


def state_bytes(model, opt) -> int:
    """Bytes of this rank's own shards of weights and AdamW state: what staging copies."""
    total = 0
    for part in state(model, opt).values():
        stack = [part]
        while stack:
            x = stack.pop()
            if isinstance(x, dict):
                stack.extend(x.values())
            elif torch.is_tensor(x):
                local = x.to_local() if hasattr(x, "to_local") else x
                total += local.numel() * local.element_size()
    return total


def max_state_diff(a: dict, b: dict) -> float:
    """Largest |difference| between two states of the same layout, shard by shard."""
    worst = 0.0
    for key, x in a.items():
        y = b[key]
        if isinstance(x, dict):
            worst = max(worst, max_state_diff(x, y))
        elif torch.is_tensor(x):
            lx = x.to_local() if hasattr(x, "to_local") else x
            ly = y.to_local() if hasattr(y, "to_local") else y
            worst = max(worst, float((lx.float() - ly.float()).abs().max()) if lx.numel() else 0)
    return worst


def local_chunk(model, name: str) -> dict:
    """This rank's block of parameter ``name``: global offsets and sizes."""
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    p = dict(model.named_parameters())[name]
    if not hasattr(p, "placements"):
        return {"offsets": [0] * p.dim(), "sizes": list(p.shape)}
    sizes, offsets = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
    return {"offsets": list(offsets), "sizes": list(sizes)}


def saved_chunks(path: str, name: str) -> list[dict]:
    """The chunks of tensor ``name`` in a DCP checkpoint's ``.metadata``, and which rank's file
    (``__<rank>_0.distcp``) holds each."""
    from torch.distributed.checkpoint import FileSystemReader

    meta = FileSystemReader(path).read_metadata()
    out = []
    for index, info in meta.storage_data.items():
        if index.fqn == name:
            chunk = next(
                c
                for c in meta.state_dict_metadata[name].chunks
                if list(c.offsets) == list(index.offset)
            )
            rank = int(info.relative_path.split("_")[2])
            out.append({"rank": rank, "offsets": list(chunk.offsets), "sizes": list(chunk.sizes)})
    return sorted(out, key=lambda c: c["rank"])
