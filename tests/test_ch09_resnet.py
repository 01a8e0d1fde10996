"""Chapter 9, ResNet demo: data readers, the model, and the training/eval scripts on CPU (gloo).

One process then two, the same script: both must reach --target_acc on the real handwritten
digits; a resume from a saved epoch must continue exactly as the uninterrupted run; the eval
script must find the accuracy the training script printed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.models import data as imagedata
from helpers.run.launch import LaunchError, launch
from helpers.models.resnet import count_parameters, model_for, resnet18

EPOCHS = "12"
TARGET = 0.9
TIMEOUT = 240


def test_resnet18_has_torchvisions_layers():
    # torchvision.models.resnet18(num_classes=10) has 11,181,642 parameters
    assert count_parameters(resnet18(num_classes=10)) == 11_181_642
    assert model_for("cifar10")(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    assert model_for("digits")(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    a, b = model_for("digits"), model_for("digits")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_digits_are_the_real_uci_digits():
    images, labels = imagedata.load_digits_arrays()
    assert images.shape == (1797, 1, 8, 8) and images.min() == 0 and images.max() == 1
    assert sorted(np.bincount(labels))[0] >= 174  # 174..183 images of each digit
    train, test = imagedata.digits_datasets()
    assert (len(train), len(test)) == (1438, 359)


def test_the_shipped_digits_are_scikit_learns_file(tmp_path, monkeypatch):
    """The copy is scikit-learn 1.9.1's file (its sha256, and its bytes where scikit-learn is
    installed); the loader prefers an installed scikit-learn's own file, and says what is missing
    when neither is there."""
    import hashlib
    import importlib.util

    shipped = imagedata.SHIPPED_DIGITS.read_bytes()
    assert hashlib.sha256(shipped).hexdigest() == imagedata.DIGITS_SHA256
    if importlib.util.find_spec("sklearn") is not None:
        import sklearn

        real = Path(sklearn.__file__).parent / "datasets" / "data" / "digits.csv.gz"
        assert real.read_bytes() == shipped and imagedata.digits_csv() == real
    fake = tmp_path / "site" / "sklearn"  # a scikit-learn as the loader sees one
    (fake / "datasets" / "data").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    before = sys.modules.pop("sklearn", None)
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        assert imagedata.digits_csv() == fake / "datasets" / "data" / "digits.csv.gz"
    finally:
        sys.path.remove(str(tmp_path / "site"))
        sys.modules.pop("sklearn", None)  # the fake goes; a real one imported before comes back
        if before is not None:
            sys.modules["sklearn"] = before
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises ImportError
    assert imagedata.digits_csv() == imagedata.SHIPPED_DIGITS
    assert imagedata.load_digits_arrays()[0].shape == (1797, 1, 8, 8)
    monkeypatch.setattr(imagedata, "SHIPPED_DIGITS", tmp_path / "missing.csv.gz")
    with pytest.raises(FileNotFoundError, match="scikit-learn"):
        imagedata.digits_csv()


def test_cifar10_reader_reads_the_python_format(tmp_path):
    folder = tmp_path / imagedata.CIFAR_FOLDER
    folder.mkdir()
    rng = np.random.default_rng(0)
    written = {}
    for name in imagedata.CIFAR_TRAIN + imagedata.CIFAR_TEST:
        images, labels = (
            rng.integers(0, 256, (4, 3, 32, 32), dtype=np.uint8),
            rng.integers(0, 10, 4),
        )
        imagedata.write_cifar_batch(folder / name, images, labels)
        written[name] = (images, labels)
    images, labels = imagedata.read_cifar_batch(folder / "test_batch")
    assert np.array_equal(images, written["test_batch"][0]) and np.array_equal(
        labels, written["test_batch"][1]
    )
    train = imagedata.Cifar10(tmp_path, train=True)
    test = imagedata.Cifar10(tmp_path, train=False)
    assert (len(train), len(test)) == (20, 4)
    x, y = test[1]
    mean, std = (
        torch.tensor(imagedata.CIFAR_MEAN).view(3, 1, 1),
        torch.tensor(imagedata.CIFAR_STD).view(3, 1, 1),
    )
    expected = (torch.from_numpy(written["test_batch"][0][1]).float() / 255 - mean) / std
    assert torch.allclose(x, expected) and y == written["test_batch"][1][1]
    assert imagedata.Cifar10(tmp_path, train=True, augment=True)[0][0].shape == (3, 32, 32)


def test_cifar10_missing_says_where(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="cifar-10-batches-py"):
        imagedata.datasets("cifar10")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    common = [
        "--data",
        "digits",
        "--epochs",
        EPOCHS,
        "--interval",
        "6",
        "--target_acc",
        str(TARGET),
    ]
    single = launch(
        "ch09_resnet_train", 1, common + ["-c", str(one)], show="none", timeout_s=TIMEOUT
    )
    double = launch(
        "ch09_resnet_train", 2, common + ["-c", str(two)], show="none", timeout_s=TIMEOUT
    )
    resumed = launch(
        "ch09_resnet_train",
        1,
        common + ["-c", str(one), "--resume", "6", "--interval", "0"],
        show="none",
        timeout_s=TIMEOUT,
    )
    evaluated = launch(
        "ch09_resnet_eval", 1, ["-c", str(one), "-e", EPOCHS, "--data", "digits"], show="none"
    )
    return dict(
        single=single.first(),
        double=double.first(),
        resumed=resumed.first(),
        eval=evaluated.first(),
        one=one,
    )


def test_one_and_two_processes_reach_the_target(runs):
    one, two = runs["single"], runs["double"]
    assert one["world_size"] == 1 and two["world_size"] == 2
    assert one["accuracy"] >= TARGET and two["accuracy"] >= TARGET
    assert two["lr"] == 2 * one["lr"]  # learning rate scaled by the world size
    assert one["milestones"] == [3, 6, 9, 12]
    assert one["losses"][-1] < one["losses"][0] / 5


def test_resume_continues_the_run_exactly(runs):
    full, resumed = runs["single"], runs["resumed"]
    assert resumed["start_epoch"] == 6 and len(resumed["losses"]) == 6
    assert resumed["losses"] == full["losses"][6:]
    assert resumed["accuracy"] == full["accuracy"]


def test_checkpoints_every_interval_and_eval_agrees(runs):
    names = sorted(p.name for p in runs["one"].iterdir())
    assert names == [
        "lr_scheduler_12.pth",
        "lr_scheduler_6.pth",
        "model_12.pth",
        "model_6.pth",
        "optimizer_12.pth",
        "optimizer_6.pth",
    ]
    assert runs["eval"]["accuracy"] == runs["single"]["accuracy"]


def test_gpu_plugins_refuse_on_cpu():
    with pytest.raises(LaunchError, match="needs CUDA GPUs"):
        launch(
            "ch09_resnet_train",
            1,
            ["--data", "digits", "-p", "low_level_zero", "--interval", "0"],
            show="none",
            timeout_s=120,
        )
