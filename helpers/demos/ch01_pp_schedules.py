"""Pipeline schedules run from scratch and timed event by event: GPipe, 1F1B, interleaved 1F1B,
ZB-H1, and the ZB-V order that Colossal-AI 0.5.0 generates.

Chapter 1, "Pipeline schedules". A stack of L blocks ``tanh(x Wᵀ + b)`` is cut into P = world
size stages (v chunks per stage for the interleaved schedule: virtual stage c·P + s on stage s;
two chunks in a V for ZB-V: virtual stages s and 2P-1-s).
Every rank builds the schedule's action list (:mod:`helpers.parallel.pp_schedules`) and runs its
own part with point-to-point messages (:func:`helpers.parallel.pp_runtime.run`), timing every
forward, backward, input-gradient B, weight-gradient W, send and receive.

Each schedule is run ``--repeats`` times; the last run's loss and the gradient of every block the
rank holds are checked against the unsplit model (torch autograd on the whole batch, in the rank)
and the demo fails if they differ. Every run's events are reported on the wall clock and on the
stage clock (:mod:`helpers.parallel.pp_runtime`), for the measured bubble.

With ``--colossal`` the ranks then build Colossal-AI 0.5.0's own interleaved and ZB-V pipelines
on the same P ranks (:func:`colossal`): the plugin's validation errors, ``PipelineGraph``'s
schedule, ``booster.boost`` and one ``booster.execute_pipeline`` step of a tiny Llama, each
reported as done or with the exception it raised. A step that runs is checked against the loss
of the unsplit model on the same batch.

    python -m torch.distributed.run --nproc_per_node 4 -m helpers.demos.ch01_pp_schedules
"""

import copy
import traceback

import torch
import torch.distributed as dist

from helpers.models.mlp import run_blocks, tanh_blocks
from helpers.parallel import pp_runtime
from helpers.parallel.pp_schedules import (
    SCHEDULES,
    V_SHAPED,
    build,
    chunks_of,
    stage_of,
    virtual_stage,
)
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch01 import PpColossalResult, PpEventsResult, PpScheduleResult
from helpers.train.reference import check_close, global_max, randn, sig, strict_fp32
from helpers.models.llama import build_llama, llama_config, token_batch


GAIN = 2.0


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--micro", type=int, default=8, help="number of micro-batches m")
    parser.add_argument("--micro-batch", type=int, default=64, help="samples per micro-batch")
    parser.add_argument("--chunks", type=int, default=2, help="chunks per stage v (interleaved)")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per chunk of a v-chunk stage")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each schedule")
    parser.add_argument("--colossal", action="store_true", help="then Colossal-AI's pipelines")
    parser.add_argument(
        "--schedules", default=",".join(SCHEDULES + V_SHAPED), help="comma-separated"
    )
    cli.add(parser, "hidden", 512, help="hidden size h (the matmul load of one block)")
    cli.add(parser, "seed", cli.SEED)
    args = parser.parse_args()
    strict_fp32()
    torch.set_num_threads(1)  # one core per stage: a stage's time is its own work
    m, mb, h, v = args.micro, args.micro_batch, args.hidden, args.chunks

    with distributed(timeout_s=600) as env:  # a loaded 2-core machine is slow, not stuck
        p, r, dev = env.world_size, env.rank, env.device
        L = p * v * args.blocks  # the same model for every schedule
        x = randn(m * mb, h, seed=args.seed + 1, device=dev)  # (m*mb, h): the batch
        y = randn(m * mb, h, seed=args.seed + 2, device=dev, scale=0.5)  # (m*mb, h)
        xs, ys = list(x.chunk(m)), list(y.chunk(m))  # m micro-batches of (mb, h)
        layers = scaled_blocks(L, h, args.seed, dev)

        ref = scaled_blocks(L, h, args.seed, dev)  # the unsplit model, on the whole batch
        ref_loss = ((run_blocks(ref, x) - y) ** 2).sum(-1).mean()  # what pp_runtime.run computes
        ref_loss.backward()

        for name in args.schedules.split(","):
            schedule, v_shape = build(name, p, m, v), name in V_SHAPED
            c = chunks_of(schedule)
            per_chunk = L // (p * c)
            blocks = [
                list(range(k * per_chunk, (k + 1) * per_chunk))
                for k in (virtual_stage(r, j, p, v_shape) for j in range(c))
            ]
            groups = pp_runtime.links(p, c, v_shape)
            runs = []
            for _ in range(args.repeats):
                chunks = [
                    pp_runtime.Chunk([(layers[i][0].weight, layers[i][0].bias) for i in idx])
                    for idx in blocks
                ]
                out = pp_runtime.run(schedule[r], r, p, chunks, xs, ys, groups, v_shape)
                runs.append({clock: rounded(out[clock]) for clock in ("wall", "stage")})
            loss = out["loss"] if out["loss"] is not None else torch.zeros((), device=dev)
            holder = stage_of(p * c - 1, p, v_shape)  # the rank of the last virtual stage
            dist.broadcast(loss, src=holder)
            check_close(f"{name}: loss", loss, ref_loss.detach())
            diff = max(
                check_close(f"{name}: grad of block {i} {what}", got, want)
                for chunk, idx in zip(chunks, blocks)
                for (g_w, g_b), i in zip(chunk.grads, idx)
                for what, got, want in (
                    ("weight", g_w, ref[i][0].weight.grad),
                    ("bias", g_b, ref[i][0].bias.grad),
                )
            )
            diff = global_max(diff, dev)
            for g in groups.values():
                dist.destroy_process_group(g)
            if r == 0:
                say(
                    f"{name}: P={p} stages x {c} chunk(s) of {per_chunk} block(s), m={m}: "
                    f"{len(schedule[0])} actions on stage 0; loss {sig(loss.item())} "
                    f"(reference {sig(ref_loss.item())}), max grad diff {diff:.1e}: OK"
                )
            emit(
                PpScheduleResult,
                schedule=name,
                stages=p,
                chunks=c,
                micro_batches=m,
                micro_batch_size=mb,
                hidden=h,
                blocks=blocks,
                actions=[a.label() for a in schedule[r]],
                loss=sig(loss.item()),
                ref_loss=sig(ref_loss.item()),
                max_grad_diff=diff,
                repeats=len(runs),
                backend=env.backend,
            )
            for i, events in enumerate(runs):  # short lines: torchrun can pass on a long one cut
                for clock, part in events.items():
                    emit(PpEventsResult, schedule=name, repeat=i, clock=clock, events=part)
        if args.colossal:
            reports = colossal(env, p, m)
            if r == 0:
                for rep in reports:
                    say(f"Colossal-AI {rep['step']}: " + ("ran" if rep["ok"] else rep["error"]))
            emit(PpColossalResult, colossal=reports)


def rounded(events: list) -> list:
    """Event times to the microsecond (the timers' useful resolution here), for shorter lines."""
    return [(round(start, 6), round(end, 6), kind, label) for start, end, kind, label in events]


def scaled_blocks(num_layers: int, hidden: int, seed: int, device: torch.device):
    """:func:`helpers.models.mlp.tanh_blocks` with every weight doubled. With the default init a
    signal shrinks about √3-fold per tanh block, and 32 blocks leave the first ones gradients near
    1e-9, which any tolerance would pass; doubled, every block's gradient is about 0.2."""
    blocks = tanh_blocks(num_layers, hidden, seed, device)
    with torch.no_grad():
        for block in blocks:
            block[0].weight.mul_(GAIN)
    return blocks


def attempt(what: str, fn) -> tuple[object, dict]:
    """``fn()`` and a report of it: ran, or the exception and the upstream line that raised it
    (for a chained exception, the first one's: the cause, not the wrapper)."""
    try:
        return fn(), {"step": what, "ok": True}
    except dist.DistError:  # a collective failed: the ranks are out of step, stop here
        raise
    except Exception as e:  # the report is the point: every outcome is shown in the book
        root = e
        while root.__cause__ or root.__context__:
            root = root.__cause__ or root.__context__
        frame = traceback.extract_tb(root.__traceback__)[-1]
        path = frame.filename
        where = path[path.find("/colossalai/") + 1 :] + f":{frame.lineno}"
        error = f"{type(e).__name__}: {e}"[:240]
        return None, {"step": what, "ok": False, "error": error, "at": where}


def colossal(env, p: int, m: int) -> list[dict]:
    """Colossal-AI's interleaved (2 chunks) and ZB-V pipelines over all P ranks, step by step."""
    from colossalai.booster import Booster
    from colossalai.booster.plugin import HybridParallelPlugin
    from colossalai.pipeline.schedule.v_schedule import PipelineGraph

    dist.barrier()  # every rank has imported Colossal-AI: the plugins' collectives start together

    def plugin(style: str, chunks: int, nodes=None):
        return lambda: HybridParallelPlugin(
            tp_size=1, pp_size=p, pp_style=style, num_model_chunks=chunks,
            scheduler_nodes=nodes, num_microbatches=m, precision="fp32",
        )  # fmt: skip

    graph = PipelineGraph(
        n_stage=p, n_micro=m, f_cost=1, b_cost=1, w_cost=1, c_cost=1, f_mem=1, b_mem=-1, w_mem=0
    )
    nodes, report = attempt("PipelineGraph(...).get_v_schedule()", graph.get_v_schedule)
    reports = [report]
    for what, make in (
        ('pp_style="1f1b", num_model_chunks=2', plugin("1f1b", 2)),
        ('pp_style="interleaved", num_model_chunks=1', plugin("interleaved", 1)),
        ('pp_style="zbv", scheduler_nodes=None', plugin("zbv", 2)),
        ('pp_style="zbv", num_model_chunks=3', plugin("zbv", 3, nodes)),
    ):
        reports.append(attempt(what, make)[1])
    config = llama_config(layers=2 * p, hidden=64, heads=4, vocab=128)
    batch = {k: t.to(env.device) for k, t in token_batch(0, 2 * m, 32, 128).items()}
    for style, what, make in (
        ("interleaved", 'pp_style="interleaved", num_model_chunks=2', plugin("interleaved", 2)),
        ("zbv", 'pp_style="zbv", scheduler_nodes=nodes', plugin("zbv", 2, nodes)),
    ):
        built, report = attempt(what, make)
        reports.append(report)
        if built is None:
            continue
        model = build_llama(config).to(env.device)
        with torch.no_grad():
            ref_loss = copy.deepcopy(model)(**batch).loss
        booster = Booster(plugin=built)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        boosted, report = attempt(f"{style}: booster.boost", lambda: booster.boost(model, opt))
        reports.append(report)
        if boosted is None:
            continue
        step = lambda: booster.execute_pipeline(  # noqa: E731
            iter([batch]), boosted[0], lambda out, _: out.loss, boosted[1], return_loss=True
        )
        out, report = attempt(f"{style}: booster.execute_pipeline", step)
        if out is not None and out.get("loss") is not None:  # the last stage holds the loss
            check_close(f"{style}: Colossal-AI pipeline loss", out["loss"], ref_loss)
            report["loss"], report["ref_loss"] = sig(out["loss"].item()), sig(ref_loss.item())
        reports.append(report)
        built.__del__()  # its process groups go here, at the same point on every rank
    return reports


if __name__ == "__main__":
    main()
