"""Chapter 2, "torch's own mesh": the notebook's glue for ``helpers/demos/ch02_torch_mesh.py``.

:func:`run` launches the demo (4 ranks, D = T = 2; a test and the notebook share the launch within
one test run, :mod:`helpers.run.shared`), :func:`check` compares every rank's torch and
Colossal-AI groups with :class:`helpers.parallel.mesh.RankMesh` and the training with its unsplit
reference, and :func:`group_rows` / :func:`placement_rows` give the chapter's two tables.
"""

from __future__ import annotations

from helpers.parallel.mesh import RankMesh
from helpers.run.launch import LaunchResult, launch

NPROC, TP = 4, 2
ARGS = ["--tp", str(TP)]
TOLERANCE = 1e-5  # fp32: every gathered gradient and weight against the unsplit model


def run() -> LaunchResult:
    """The demo on 4 ranks: D = 2 × T = 2."""
    return launch("ch02_torch_mesh", nproc=NPROC, args=ARGS, timeout_s=300)


def book_mesh() -> RankMesh:
    return RankMesh.for_world(NPROC, tp=TP)


def check(results: list[dict]) -> dict:
    """Raise unless both meshes give RankMesh's coordinates and groups on every rank, the groups
    are real (all-reduce sums), torch holds Colossal-AI's group objects when wrapped, and FSDP2 +
    tensor parallel matched the unsplit model, on torch's mesh and on Colossal-AI's groups; return
    the exact facts the notebook prints."""
    mesh = book_mesh()
    if sorted(r["rank"] for r in results) != list(range(NPROC)):
        raise AssertionError(f"expected one result from each of {NPROC} ranks")
    for r in results:
        want = mesh.coords(r["rank"])
        coords = [want[a] for a in r["axes"]]
        assert r["torch_coords"] == coords == r["colossal_coords"], r
        for a in r["axes"]:
            group = mesh.group_of(r["rank"], a)
            assert r["torch_groups"][a] == group == r["colossal_groups"][a], (r["rank"], a)
            assert r["sums"][a] == sum(group), (r["rank"], a)
        assert r["same_group_objects"], r["rank"]
        for run in (r, r["on_colossal_groups"]):
            assert run["losses"] == r["ref_losses"], r["rank"]
            assert run["max_grad_diff"] <= TOLERANCE, r["rank"]
            assert run["max_weight_diff"] <= TOLERANCE, r["rank"]
    return {
        "ranks": len(results),
        "axes": results[0]["axes"],
        "groups agree": True,
        "same group objects": all(r["same_group_objects"] for r in results),
        "losses": results[0]["losses"],
        "losses equal the unsplit model's": all(r["losses"] == r["ref_losses"] for r in results),
        "the same on Colossal-AI's groups": all(
            r["on_colossal_groups"]["losses"] == r["ref_losses"] for r in results
        ),
    }


def group_rows(results: list[dict]) -> list[dict]:
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
