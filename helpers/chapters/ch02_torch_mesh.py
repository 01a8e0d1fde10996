"""Chapter 2, "torch's own mesh": the notebook's glue for ``helpers/demos/ch02_torch_mesh.py``.

:func:`run` launches the demo (4 ranks, D = T = 2; a test and the notebook share the launch within
one test run, :mod:`helpers.run.shared`), :func:`facts` compares every rank's torch and
Colossal-AI groups with :class:`helpers.parallel.mesh.RankMesh` and the training with its unsplit
reference, and :func:`group_rows` / :func:`placement_rows` give the chapter's two tables.
"""

from __future__ import annotations

from helpers.parallel.mesh import RankMesh
from helpers.run.launch import LaunchResult, launch
from helpers.run.result_types.ch02 import TorchMeshResult

NPROC, TP = 4, 2
ARGS = ["--tp", str(TP)]
TOLERANCE = 1e-5  # fp32: every gathered gradient and weight against the unsplit model


def run() -> LaunchResult:
    """The demo on 4 ranks: D = 2 × T = 2."""
    return launch("ch02_torch_mesh", nproc=NPROC, args=ARGS, timeout_s=300)


def book_mesh() -> RankMesh:
    return RankMesh.for_world(NPROC, tp=TP)


def facts(results: list[TorchMeshResult]) -> dict:
    """What the run shows, with no verdict of its own: whether both meshes give RankMesh's
    coordinates and groups on every rank, whether each group's all-reduce summed its members,
    whether torch holds Colossal-AI's group objects when wrapped, and how far FSDP2 + tensor
    parallel landed from the unsplit model, on torch's mesh and on Colossal-AI's groups."""
    mesh = book_mesh()

    def groups_agree(r: dict) -> bool:
        return all(
            r["torch_groups"][a] == mesh.group_of(r["rank"], a) == r["colossal_groups"][a]
            for a in r["axes"]
        )

    runs = [run for r in results for run in (r, r["on_colossal_groups"])]
    return {
        "ranks": sorted(r["rank"] for r in results),
        "axes": results[0]["axes"],
        "coordinates agree": all(
            r["torch_coords"]
            == [mesh.coords(r["rank"])[a] for a in r["axes"]]
            == r["colossal_coords"]
            for r in results
        ),
        "groups agree": all(groups_agree(r) for r in results),
        "all-reduce sums agree": all(
            r["sums"][a] == sum(mesh.group_of(r["rank"], a)) for r in results for a in r["axes"]
        ),
        "same group objects": all(r["same_group_objects"] for r in results),
        "losses": results[0]["losses"],
        "losses equal the unsplit model's": all(
            run["losses"] == r["ref_losses"]
            for r in results
            for run in (r, r["on_colossal_groups"])
        ),
        "max grad diff": max(run["max_grad_diff"] for run in runs),
        "max weight diff": max(run["max_weight_diff"] for run in runs),
    }


def check(results: list[TorchMeshResult]) -> dict:
    """:func:`facts`, asserted (for the tests; the notebook asserts them in its own cell)."""
    if sorted(r["rank"] for r in results) != list(range(NPROC)):
        raise AssertionError(f"expected one result from each of {NPROC} ranks")
    found = facts(results)
    for key in (
        "coordinates agree",
        "groups agree",
        "all-reduce sums agree",
        "same group objects",
        "losses equal the unsplit model's",
    ):
        assert found[key], key
    assert found["max grad diff"] <= TOLERANCE and found["max weight diff"] <= TOLERANCE, found
    return found


def group_rows(results: list[TorchMeshResult]) -> list[dict]:
    """One row per rank: its coordinate and groups from torch's DeviceMesh and from
    ProcessGroupMesh."""
    rows = []
    for r in sorted(results, key=lambda r: r["rank"]):
        row = {"rank": r["rank"], "(r_D, r_T) torch": tuple(r["torch_coords"])}
        row["(r_D, r_T) Colossal-AI"] = tuple(r["colossal_coords"])
        for a in r["axes"]:
            row[f"{a} group torch"] = r["torch_groups"][a]
            row[f"{a} group Colossal-AI"] = r["colossal_groups"][a]
        rows.append(row)
    return rows


def placement_rows(result: dict) -> list[dict]:
    """One row per parameter of the first block: global shape, this rank's shape, placements
    (one per mesh axis: dp, then tp)."""
    return [
        {
            "parameter": name,
            "global shape": tuple(p["global"]),
            "local shape": tuple(p["local"]),
            "placements (dp, tp)": ", ".join(p["placements"]),
        }
        for name, p in sorted(result["placements"].items())
        if name.startswith("blocks.0.")
    ]
