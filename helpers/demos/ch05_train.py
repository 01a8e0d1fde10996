"""Chapter 5: one training entry point, driven by a config file, that saves, resumes and reports.

    torchrun --nproc_per_node 2 -m helpers.demos.ch05_train --config helpers/demos/ch05_tiny.yaml
    torchrun ... --resume                      # continue from the last complete checkpoint
    torchrun ... --kill_at 5 --kill_rank 1     # fault demo: rank 1 SIGKILLs itself at step 5

The flags and the config: :mod:`helpers.train.run_config`. The loop
(:func:`helpers.train.loop.train`): the plugin comes from the config through Chapter 4's
``plugin_spec`` (:func:`helpers.config.plugin.build_plugin`); every ``save_interval`` steps and
at the end it writes an atomic checkpoint (:mod:`helpers.train.checkpoint`); rank 0 logs
throughput, memory and the communication-wait share every ``--log_interval`` steps
(:mod:`helpers.train.signals`) and reports each step's loss as a RESULT line.
"""

from helpers.run import cli
from helpers.run.env import distributed, emit
from helpers.run.result_types.ch05 import TrainResult
from helpers.train.loop import train
from helpers.train.run_config import parse_args


def main(argv=None) -> None:
    args = parse_args(argv)
    with distributed() as env, cli.plugin_lifetime() as keep:
        result, plugin = train(args, env)
        keep(plugin)
        if env.rank == 0:
            emit(TrainResult, **result)


if __name__ == "__main__":
    main()
