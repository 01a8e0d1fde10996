"""Chapter 4's notebook glue (helpers.chapters.ch04_config): the rejected edits of section 2, the
configs section 3 maps to plugins, and the line section 5 prints for the recorded dry run."""

from helpers.chapters import ch04_config as config_show
from helpers.config.loading import CONFIG_DIR
from helpers.config.plugin import plugin_spec

GOOD = (CONFIG_DIR / "tiny_gpu_hybrid.yaml").read_text()


def test_rejections_keep_each_rejected_edit_and_leave_out_an_accepted_one():
    edits = {
        "key typo": ("save_interval", "save_intervall"),
        "tensor vs heads": ("tensor: 2", "tensor: 3"),
        "harmless": ("save_interval", "save_interval"),
    }
    found = config_show.rejections(GOOD, edits)
    assert list(found) == ["key typo", "tensor vs heads"]
    assert "did you mean 'save_interval'?" in found["key typo"]
    assert "does not divide model.heads" in found["tensor vs heads"]


def test_plugin_examples_are_the_files_then_the_variants_of_dp16():
    variants = {"dp16 + ZeRO-2 bf16": {"parallelism": {"zero_stage": 2}}}
    examples = config_show.plugin_examples(variants)
    assert list(examples) == [*config_show.EXAMPLE_FILES, "dp16 + ZeRO-2 bf16"]
    base, varied = examples["dp16_fp32.yaml"], examples["dp16 + ZeRO-2 bf16"]
    assert (base.parallelism.zero_stage, varied.parallelism.zero_stage) == (0, 2)
    assert varied.parallelism.data == base.parallelism.data
    assert plugin_spec(varied).plugin == "LowLevelZeroPlugin"


def test_dry_run_line_spells_out_the_last_step():
    signals = {
        "samples_per_s": 2.34,
        "tokens_per_s": 73.4,
        "memory": {"gpu_peak_mib": 65.2},
        "comm_busy_share": 0.0041,
    }
    dry_run = {
        "run": {
            "plugin": "HybridParallelPlugin",
            "backend": "nccl",
            "losses": [4.891],
            "signals": [{}, signals],
            "last_checkpoint": "/tmp/x/ckpt/step_00000001",
        }
    }
    assert config_show.dry_run_line(dry_run) == (
        "HybridParallelPlugin on nccl: 1 step, loss 4.89, 2.3 samples/s (73 tokens/s), "
        "GPU peak 65 MiB, NCCL busy 0.4% of the step; checkpoint step_00000001 written"
    )


def test_wrap_fits_the_page_and_keeps_words_whole():
    message = "parallelism.tensor = 3: " + "does not divide model.heads = 8; " * 6
    text = config_show.wrap(message)
    assert all(len(line) <= 100 for line in text.splitlines())
    assert " ".join(text.split()) == " ".join(message.split())  # nothing lost, nothing cut
