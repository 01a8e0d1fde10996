"""Chapter 5: DeepSpeed's universal checkpoint, saved under one layout and loaded under another.

    torchrun --nproc_per_node 4 -m helpers.demos.ch05_dcp_universal --phase save --tp 2 --dir D
    python -m deepspeed.checkpoint.ds_to_universal ...     (helpers.train.ds_universal.convert)
    torchrun --nproc_per_node 2 -m helpers.demos.ch05_dcp_universal --phase load --dir D_uni

``save``: ZeRO ``--zero`` over D = world / T ranks with AutoTP over ``--tp`` ranks trains the tiny
Llama of :mod:`helpers.train.dcp_reshard` to ``--save_at``, writes ``engine.save_checkpoint`` and
trains on to ``--steps``: the uninterrupted reference. ``load``: a new layout (``--tp``,
``--zero``, the launched ranks) reads the converted checkpoint (``load_universal``) and trains
from ``--save_at`` to ``--steps``. ``--raw`` loads the unconverted checkpoint instead, without
``load_universal``; that fails under another layout, and the rank reports DeepSpeed's error.
"""

import logging

from helpers.run import cli
from helpers.run.env import distributed, emit, say
from helpers.run.result_types.ch05 import DsUniversalResult
from helpers.train import deepspeed_run as dsr
from helpers.train import ds_universal as du


def main() -> None:
    parser = cli.parser(__doc__)
    parser.add_argument("--phase", choices=("save", "load"), required=True)
    parser.add_argument("--dir", required=True, help="checkpoint folder")
    cli.add(parser, "tp", 1, help="AutoTP degree T")
    cli.add(parser, "zero", 1, help="ZeRO stage")
    cli.add(parser, "steps", 8)
    parser.add_argument("--save_at", type=int, default=4, help="steps done when saving")
    parser.add_argument("--raw", action="store_true", help="load without the conversion")
    args = parser.parse_args()
    with distributed() as env:
        deepspeed = dsr.import_deepspeed(cpu=not env.is_gpu)
        logging.getLogger("DeepSpeed").setLevel(logging.ERROR)  # its notes on loading, not ours
        deepspeed.init_distributed(dist_backend=env.backend)  # reuses the open process group
        universal = args.phase == "load" and not args.raw
        eng, d, r_d = du.engine(deepspeed, args.tp, args.zero, universal)
        out = {"tp": args.tp, "zero": args.zero, "dp": d, "world_size": env.world_size}
        if args.phase == "save":
            before = du.train(eng, d, r_d, range(args.save_at))
            eng.save_checkpoint(args.dir, tag=du.TAG)
            out["losses"] = before + du.train(eng, d, r_d, range(args.save_at, args.steps))
        else:
            try:
                eng.load_checkpoint(args.dir, tag=du.TAG)
            except Exception as e:  # --raw under another layout: DeepSpeed's own refusal
                out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            else:
                out["losses"] = du.train(eng, d, r_d, range(args.save_at, args.steps))
        if env.rank == 0:
            say(f"{args.phase}: ZeRO-{args.zero}, T={args.tp}, D={d}: {out.get('error', 'ok')}")
        emit(DsUniversalResult, phase=args.phase, deepspeed=deepspeed.__version__, **out)


if __name__ == "__main__":
    main()
