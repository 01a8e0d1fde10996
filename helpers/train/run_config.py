"""Chapter 5: one training entry point, driven by a config file, that saves, resumes and reports.

The entry point's command line (``helpers/demos/ch05_train.py``; the recorders parse their run
lists with :func:`parser`) and the config it trains: Chapter 4's YAML file
(:func:`helpers.config.loading.load_config`) for this world size, with the command line's
overrides of ``train.*`` applied (:func:`configure`); :func:`layout_of` is what a checkpoint
records of the layout, which a resume must match.
"""

from __future__ import annotations

import argparse

from helpers.config.loading import load_config
from helpers.run import cli

DROPOUT = 0.1  # attention dropout draws on the torch RNG every step: a resume must restore it


def _at_least_one(text: str) -> int:
    """argparse type: a whole number ≥ 1 (``step % n`` would divide by zero every rank)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 1, got {text}")
    return value


def parser():
    """The command line (the recorders' tests parse their run lists with it)."""
    p = cli.parser(__doc__)
    p.add_argument(
        "--config", required=True, help="YAML config (helpers.config.loading.load_config)"
    )
    cli.add(p, "steps", help="override train.steps")
    p.add_argument("--save_interval", type=int, help="override train.save_interval (0: never save)")
    p.add_argument("--checkpoint_dir", help="override train.checkpoint_dir")
    p.add_argument(
        "--keep_last", type=int, help="override train.keep_last (0: keep every checkpoint)"
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        help="'latest' (the default when given "
        "without a value) or a checkpoint folder step_XXXXXXXX",
    )
    p.add_argument(
        "--reshard",
        action="store_true",
        help="resume a checkpoint saved under another layout "
        "(same global batch and seed): continues the run, not bit for bit",
    )
    p.add_argument(
        "--dropout",
        type=float,
        default=DROPOUT,
        help="attention dropout (0 for cross-layout comparisons)",
    )
    p.add_argument(
        "--bucket_cap_mb", type=float, help="DDP gradient bucket size (default: torch's 25 MB)"
    )
    p.add_argument(
        "--log_interval", type=_at_least_one, default=2, help="steps between signal lines (≥ 1)"
    )
    p.add_argument(
        "--progress",
        choices=("auto", "on", "off"),
        default="auto",
        help="tqdm bar on rank 0 (auto: only when stderr is a terminal)",
    )
    p.add_argument(
        "--kill_at", type=int, help="fault demo: step at which --kill_rank SIGKILLs itself"
    )
    p.add_argument("--kill_rank", type=int, default=1)
    p.add_argument(
        "--kill_in_save", action="store_true", help="die while saving step --kill_at instead"
    )
    return p


def parse_args(argv=None):
    return parser().parse_args(argv)


def configure(args, world_size: int):
    """The config for this world size, with the command line's overrides applied."""
    cfg = load_config(args.config, world_size=world_size)
    train = {
        k: v
        for k in ("steps", "save_interval", "checkpoint_dir", "keep_last")
        if (v := getattr(args, k)) is not None
    }
    if train.get("keep_last") == 0:
        train["keep_last"] = None
    return cfg.with_changes({"train": train}) if train else cfg


def layout_of(cfg, world_size: int) -> dict:
    """What a checkpoint records and a resume must match for the run to continue bit for bit."""
    p, t = cfg.parallelism, cfg.train
    return {
        "world_size": world_size,
        "data": cfg.data_degree,
        "tensor": p.tensor,
        "pipeline": p.pipeline,
        "sequence": p.sequence,
        "batch_size": t.batch_size,
        "micro_batch": cfg.micro_batch,
        "seed": t.seed,
    }
