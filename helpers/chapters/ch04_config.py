"""Chapter 4 (configuration files): the notebook's glue for sections 2, 3 and 5, and :func:`wrap`,
which fits the long messages of a refusal into the page's column.

Section 2 breaks a valid file in one place at a time and prints what :func:`rejections` (and, for
whole configs, :func:`rejections_of`) collects;
section 3 maps :func:`plugin_examples` to plugins; section 5 prints the recorded two-GPU dry run
of ``helpers.record.ch05`` as :func:`dry_run_line` spells it.
"""

from __future__ import annotations

import textwrap

from helpers.parallel.errors import ConfigError
from helpers.config.loading import load_config


def wrap(text: str, width: int = 100, indent: str = "    ") -> str:
    """Each line of ``text`` wrapped at ``width`` characters (the page's column), continuations
    indented; words are never broken, so a field name or a path stays whole."""
    return "\n".join(
        textwrap.fill(
            line, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
        )
        for line in text.splitlines()
    )


EXAMPLE_FILES = ("tiny_cpu.yaml", "dp16_fp32.yaml", "tiny_gpu_hybrid.yaml", "seed_complete.yaml")


def rejections(good: str, edits: dict[str, tuple[str, str]]) -> dict[str, str]:
    """Section 2: ``{name: ConfigError message}`` for each edit ``(old, new)`` of the YAML text
    ``good`` that :func:`helpers.config.loading.load_config` rejects; an edit it accepts is left
    out, so ``len(result) == len(edits)`` says that every one was caught."""
    return rejections_of({name: good.replace(old, new) for name, (old, new) in edits.items()})


def rejections_of(sources: dict) -> dict[str, str]:
    """Section 2: ``{name: ConfigError message}`` for each config source (YAML text, a path or a
    dict) that :func:`helpers.config.loading.load_config` rejects; an accepted one is left out."""
    found = {}
    for name, source in sources.items():
        try:
            load_config(source)
        except ConfigError as e:
            found[name] = str(e)
    return found


def plugin_examples(variants: dict[str, dict]) -> dict:
    """Section 3: the example files of ``helpers/configs`` (:data:`EXAMPLE_FILES`, by file name),
    then ``dp16_fp32.yaml`` with each of ``variants``' changes (``Config.with_changes``)."""
    examples = {name: load_config(name) for name in EXAMPLE_FILES}
    dp16 = examples["dp16_fp32.yaml"]
    examples.update({name: dp16.with_changes(c) for name, c in variants.items()})
    return examples


def dry_run_line(dry_run: dict) -> str:
    """Section 5: one line on a recorded dry run (``record["runs"][0]["dry_run"]`` of
    ``helpers.record.ch05``): plugin, backend, steps, first loss, the last step's throughput, GPU
    peak and NCCL share, and the checkpoint it wrote."""
    run = dry_run["run"]
    step = run["signals"][-1]
    return (
        f"{run['plugin']} on {run['backend']}: {len(run['losses'])} step, loss "
        f"{run['losses'][0]:.2f}, {step['samples_per_s']:.1f} samples/s "
        f"({step['tokens_per_s']:.0f} tokens/s), "
        f"GPU peak {step['memory']['gpu_peak_mib']:.0f} MiB, "
        f"NCCL busy {100 * step['comm_busy_share']:.1f}% of the step; "
        f"checkpoint {run['last_checkpoint'].rsplit('/', 1)[-1]} written"
    )
