"""Chapter 2's demo results (``helpers/demos/ch02_*.py``): dimensions combined on one rank grid."""

from typing import Any, NotRequired

from helpers.run.result_types import Emitted


class ThreeDResult(Emitted):
    coords: dict[str, int]
    groups: dict[str, list[int]]
    layers: list[int]
    losses: list[float]
    ref_losses: list[float]
    max_grad_diff: float
    max_weight_diff: float
    dp: int
    pp: int
    tp: int
    world_size: int
    backend: str
    optimizer: str
    adam_state_elements: int


class MeshResult(Emitted):
    layout: str
    coords: dict[str, int]
    groups: dict[str, list[int]]
    sums: dict[str, int]
    world_size: int
    plugin: NotRequired[dict[str, Any]]  # with --plugin


class TorchMeshResult(Emitted):
    axes: list[str]
    torch_coords: list[int]
    colossal_coords: list[int]
    torch_groups: dict[str, list[int]]
    colossal_groups: dict[str, list[int]]
    sums: dict[str, int]
    same_group_objects: bool
    dtensor_local: list[list[float]]
    dtensor_placements: list[str]
    placements: dict[str, dict[str, Any]]
    losses: list[float]
    ref_losses: list[float]
    max_grad_diff: float
    max_weight_diff: float
    on_colossal_groups: dict[str, Any]
    backend: str
    world_size: int


class TraceResult(Emitted):
    order: str
    coords: dict[str, int]
    trace: list[Any]
    numbers: dict[str, Any]
    max_grad_diff: float
    dp: int
    pp: int
    tp: int
    layers: list[int]
    params_per_rank: int
    backend: str
