"""DeepSpeed ZeRO-1, 2 and 3 from one Colossal-AI YAML, against a single-process reference.

Chapter 6. The book's config (default ``helpers/configs/ch06_deepspeed.yaml``: the tiny Llama of
Chapter 6's CPU runs, data 2, two micro-batches per step, fp32) is converted to a DeepSpeed JSON
file per ZeRO stage by :func:`helpers.config.deepspeed_json.to_deepspeed`, and each file goes to
``deepspeed.initialize``: YAML -> JSON -> an engine that trains. Every rank first trains the
single-process reference on the same global batches; rank 0 checks that the mean of the ranks'
losses stays within :data:`helpers.train.deepspeed_run.TOLERANCE` of it for every run, and each
rank reports what it holds and the collectives it called (:mod:`helpers.train.deepspeed_run`).

    python -m torch.distributed.run --nproc_per_node 2 -m helpers.demos.ch06_deepspeed

On the CPU the ranks use DeepSpeed's CPU accelerator with gloo.
"""

import tempfile
from pathlib import Path

import torch.distributed as dist

from helpers.config.loading import load_config
from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch06 import DeepSpeedResult
from helpers.train import deepspeed_run as dsr

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "ch06_deepspeed.yaml"


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--config", default=str(CONFIG), help="the book's YAML to convert")
    parser.add_argument(
        "--runs", nargs="+", default=[n for n, _, _ in dsr.RUNS], choices=[n for n, *_ in dsr.RUNS]
    )
    args = parser.parse_args()
    cfg = load_config(args.config)
    counter = dsr.CommCounter()
    counter.install()  # before DeepSpeed sees torch.distributed
    with distributed(timeout_s=120) as env:
        if cfg.data_degree not in (None, env.world_size):
            raise SystemExit(f"{args.config} says data {cfg.data_degree}: launch that many ranks")
        cfg = cfg.resolve(env.world_size) if cfg.data_degree is None else cfg
        deepspeed = dsr.import_deepspeed(cpu=not env.is_gpu)
        deepspeed.init_distributed(dist_backend=env.backend)  # reuses the open process group
        batches = dsr.global_batches(cfg)
        ref = dsr.reference(cfg, batches)
        runs = []
        with tempfile.TemporaryDirectory() as folder:
            for name, stage, extra in dsr.RUNS:
                if name not in args.runs:
                    continue
                path, refused = dsr.stage_config(cfg, stage, extra, Path(folder))
                losses, held = dsr.train_stage(deepspeed, cfg, path, batches, counter, env.device)
                runs.append(
                    dict(
                        name=name,
                        stage=stage,
                        json=path.read_text(),
                        schema=refused,
                        losses=losses,
                        held=held,
                        calls=dict(counter.calls),
                        elements=dict(counter.elements),
                    )
                )
        everyone = [None] * env.world_size
        dist.all_gather_object(everyone, [r["losses"] for r in runs])
        gathered = [
            {"name": r["name"], "ranks": [{"losses": e[i]} for e in everyone]}
            for i, r in enumerate(runs)
        ]
        gap = dsr.check(gathered, ref)  # raises past the tolerance
        if env.rank == 0:
            for r in runs:
                say(
                    f"{r['name']:32s} rank 0 keeps {r['held']['live']:>7,} of "
                    f"{r['held']['params']:,} parameters whole; {sum(r['calls'].values())} calls"
                )
            say(f"every run within {dsr.TOLERANCE:g} of the single-process reference")
        emit(
            DeepSpeedResult,
            deepspeed=deepspeed.__version__,
            backend=env.backend,
            world_size=env.world_size,
            reference=ref,
            max_gap=gap,
            tolerance=dsr.TOLERANCE,
            runs=runs,
        )


if __name__ == "__main__":
    main()
