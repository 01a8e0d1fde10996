"""Chapter 2, "torch's own mesh": DeviceMesh beside ProcessGroupMesh, then FSDP2 + tensor parallel.

    torchrun --nproc_per_node 4 -m helpers.demos.ch02_torch_mesh --tp 2

On G = D·T ranks every rank builds the same 2-D grid twice, torch's ``init_device_mesh`` with
axes ("dp", "tp") and Colossal-AI's ``ProcessGroupMesh(D, T)``, and reports its coordinate and its
group along each axis from both; an all-reduce of the members' ranks over each torch group proves
the group real. It then wraps Colossal-AI's groups in a ``DeviceMesh`` (``from_group``) and checks
that torch holds the very same group objects, and splits a 4 × 4 matrix as a ``DTensor`` over both
axes.

Finally it trains Chapter 2's Megatron MLP stack with torch's tensor parallel over ``tp`` and FSDP2
over ``dp`` (:func:`helpers.parallel.device_mesh.shard_2d`), twice: on torch's mesh and on the mesh
that wraps Colossal-AI's groups. Replica r_D trains on its rows of the global batch; each step the
loss, every gathered gradient and, after SGD, every gathered weight must equal the unsplit model's
on the whole batch (fp32 tolerance), or the rank raises.
"""

import logging

import torch
import torch.distributed as dist
import torch.nn.functional as F

from helpers.parallel import device_mesh as dm
from helpers.parallel.tp import mlp_block, mlp_blocks
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch02 import TorchMeshResult
from helpers.train.reference import check_close, randn, sig, strict_fp32

# the unsplit tensor behind each nn.Linear parameter of a block (the same (out, in) layout)
_SOURCE = {"up.weight": "w1", "up.bias": "b1", "down.weight": "w2", "down.bias": "b2"}


def _reference_of(name: str, full, what: str) -> torch.Tensor:
    _, i, rest = name.split(".", 2)
    return getattr(full[int(i)][_SOURCE[rest]], what)


def _checked(when: str, got: dict[str, torch.Tensor], full, what: str) -> float:
    """Max |difference| of every gathered tensor from the unsplit model's; raises if outside."""
    return max(check_close(f"{when} {n}", t, _reference_of(n, full, what)) for n, t in got.items())


def _train_2d(mesh, args, device) -> dict:
    """Chapter 2's MLP stack with tensor parallel over ``mesh['tp']`` and FSDP2 over
    ``mesh['dp']``, ``args.steps`` SGD steps, every loss, gathered gradient and weight checked
    against the unsplit model on the whole batch (raises if one differs)."""
    full = mlp_blocks(args.layers, args.hidden, args.seed, device)
    model = dm.shard_2d(dm.Stack(full), mesh)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    dp, r_d, rows = mesh["dp"].size(), mesh["dp"].get_local_rank(), args.rows
    out = {"losses": [], "ref_losses": [], "grad_diffs": [], "weight_diffs": []}
    for step in range(args.steps):
        x = randn(dp * rows, args.hidden, seed=1000 + step, device=device)  # (D·rows, h)
        y = randn(dp * rows, args.hidden, seed=2000 + step, device=device)
        mine = slice(r_d * rows, (r_d + 1) * rows)
        loss = F.mse_loss(model(x[mine]), y[mine])  # this replica's mean
        loss.backward()
        ref = x
        for p in full:
            ref = mlp_block(ref, p)
        ref = F.mse_loss(ref, y)
        ref.backward()
        mean = loss.detach().clone()
        dist.all_reduce(mean, group=mesh["dp"].get_group())
        mean /= dp  # equal rows per replica: the mean of the means is the global mean
        check_close(f"step {step} loss", mean, ref)
        out["losses"].append(sig(mean.item()))
        out["ref_losses"].append(sig(ref.item()))
        grads = dm.unsplit_grads(model)
        out["grad_diffs"].append(_checked(f"step {step} grad", grads, full, "grad"))
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            for t in (t for p in full for t in p.values()):
                t -= args.lr * t.grad
                t.grad = None
        weights = dm.unsplit_params(model)
        out["weight_diffs"].append(_checked(f"after step {step}", weights, full, "data"))
    out["placements"] = dm.placements(model)
    return out


def main() -> None:
    parser = cli.parser(__doc__)
    cli.add(parser, "tp", 2, help="tensor-parallel degree T (D = G / T)")
    cli.add(parser, "layers", 2, help="MLP blocks")
    cli.add(parser, "hidden", 8, help="hidden size h (4h divisible by T·D, h by D)")
    parser.add_argument("--rows", type=int, default=4, help="rows of the batch per replica")
    cli.add(parser, "steps", 2)
    cli.add(parser, "lr", 0.1, help=None)
    cli.add(parser, "seed", cli.SEED)
    args = parser.parse_args()
    strict_fp32()
    # gathering a (_StridedShard, Shard) parameter whole takes two all-gathers; torch warns
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    with distributed() as env:
        if env.world_size % args.tp:
            raise ValueError(f"T={args.tp} does not divide {env.world_size} ranks")
        sizes = {"dp": env.world_size // args.tp, "tp": args.tp}
        kind = env.device.type
        mesh = dm.torch_mesh(sizes, kind)
        pg_mesh, axes = dm.colossal_mesh(sizes)
        torch_groups, colossal_groups = dm.members(mesh, axes), dm.members(pg_mesh, axes)
        sums = {}
        for a in axes:
            total = torch.tensor([env.rank], device=env.device)
            dist.all_reduce(total, group=mesh[a].get_group())  # only the members take part
            sums[a] = int(total.item())
        bridged = dm.from_colossal(pg_mesh, axes, kind)
        same_objects = all(
            bridged[a].get_group() is pg_mesh.get_group_along_axis(k) for k, a in enumerate(axes)
        )
        # a DTensor: rows split over dp, columns over tp; each rank holds one block
        from torch.distributed.tensor import Shard, distribute_tensor

        whole = torch.arange(16.0, device=env.device).reshape(4, 4)
        piece = distribute_tensor(whole, mesh, [Shard(0), Shard(1)])
        assert torch.equal(piece.full_tensor(), whole)

        # FSDP2 over dp + tensor parallel over tp, against the unsplit stack: on torch's mesh,
        # then on the mesh that wraps Colossal-AI's groups
        trained = _train_2d(mesh, args, env.device)
        on_colossal = _train_2d(bridged, args, env.device)
        losses, ref_losses = trained["losses"], trained["ref_losses"]
        grad_diffs, weight_diffs = trained["grad_diffs"], trained["weight_diffs"]
        if env.rank == 0:
            say(f"G = {env.world_size} = D {sizes['dp']} x T {args.tp} ({env.backend}); {mesh}")
            for step in range(args.steps):
                say(
                    f"step {step}: loss {losses[step]} (unsplit {ref_losses[step]}), "
                    f"gradients within {grad_diffs[step]:.1e}, weights within "
                    f"{weight_diffs[step]:.1e}"
                )
            say(
                f"the same on Colossal-AI's groups: losses {on_colossal['losses']}, gradients "
                f"within {max(on_colossal['grad_diffs']):.1e}"
            )
            say("OK: FSDP2 + tensor parallel on the 2-D DeviceMesh match the unsplit model")
        emit(
            TorchMeshResult,
            axes=list(axes),
            torch_coords=[int(c) for c in mesh.get_coordinate()],
            colossal_coords=[int(c) for c in pg_mesh.coordinate()],
            torch_groups=torch_groups,
            colossal_groups=colossal_groups,
            sums=sums,
            same_group_objects=same_objects,
            dtensor_local=piece.to_local().tolist(),
            dtensor_placements=[str(p) for p in piece.placements],
            placements=trained["placements"],
            losses=losses,
            ref_losses=ref_losses,
            max_grad_diff=max(grad_diffs),
            max_weight_diff=max(weight_diffs),
            on_colossal_groups={
                "losses": on_colossal["losses"],
                "max_grad_diff": max(on_colossal["grad_diffs"]),
                "max_weight_diff": max(on_colossal["weight_diffs"]),
            },
            backend=env.backend,
            world_size=env.world_size,
        )
        del trained, on_colossal, bridged, mesh
        pg_mesh.destroy_mesh_process_groups()


if __name__ == "__main__":
    main()
