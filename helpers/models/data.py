"""Image classification data for Chapter 9's ResNet demo: real CIFAR-10 and real handwritten digits.

Used by ``helpers/demos/ch09_resnet_train.py`` and ``ch09_resnet_eval.py``. Colossal-AI's example
(examples/images/resnet/train.py) trains on CIFAR-10 through torchvision, found under the folder
named by the ``DATA`` environment variable (default ``./data``) and downloaded when missing. This
module reads the same files without torchvision: the "python version" of CIFAR-10
(Krizhevsky 2009, https://www.cs.toronto.edu/~kriz/cifar.html) is ``cifar-10-batches-py/`` with
five pickled training batches ``data_batch_1..5`` and one ``test_batch``, each a dict with
``b"data"`` (N × 3072 uint8, the red, green, blue 32×32 planes in turn) and ``b"labels"``.
Nothing is downloaded (no machine of this book is online): when the files are missing the error
says where to put them.

The offline dataset is scikit-learn's copy of the UCI handwritten digits (Alpaydin & Kaynak 1998):
1,797 real 8×8 grey images of the digits 0-9, 16 grey levels. scikit-learn ships it as
``sklearn/datasets/data/digits.csv.gz`` (64 pixel columns then the label); where scikit-learn is
not installed (the book's own environment, the GPU box) the byte-identical copy in
``helpers/data/`` is read instead (its README gives the file's sha256).
"""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset

CIFAR_FOLDER = "cifar-10-batches-py"
CIFAR_TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
CIFAR_TEST = ["test_batch"]
# per-channel mean and std of the CIFAR-10 training images (as in Colossal-AI's example)
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


def data_root() -> Path:
    """The folder the seed's ``DATA`` environment variable names (default ``./data``)."""
    return Path(os.environ.get("DATA", "./data"))


SHIPPED_DIGITS = Path(__file__).resolve().parents[1] / "data" / "digits.csv.gz"
# scikit-learn 1.9.1's digits.csv.gz, of which SHIPPED_DIGITS is a copy (helpers/data/README.md)
DIGITS_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"


def digits_csv() -> Path:
    """Where the digits CSV is: scikit-learn's own file, else the copy shipped in helpers/data."""
    try:
        import sklearn
    except ImportError:
        if not SHIPPED_DIGITS.exists():
            raise FileNotFoundError(
                f"the digits need scikit-learn (pip install scikit-learn) or the copy "
                f"{SHIPPED_DIGITS} of its digits.csv.gz"
            ) from None
        return SHIPPED_DIGITS
    return Path(sklearn.__file__).parent / "datasets" / "data" / "digits.csv.gz"


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(images float32 (1797, 1, 8, 8) in [0, 1], labels int64 (1797,)) from the CSV."""
    with gzip.open(digits_csv(), "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.float32)
    images = (table[:, :64] / 16.0).reshape(-1, 1, 8, 8)
    return images, table[:, 64].astype(np.int64)


def digits_datasets() -> tuple[TensorDataset, TensorDataset]:
    """Train and test sets: a fixed shuffled split (80 % / 20 %), the same on every rank and run."""
    images, labels = load_digits_arrays()
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(labels))
    n_test = int(len(labels) * DIGITS_TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    as_set = lambda idx: TensorDataset(torch.from_numpy(images[idx]), torch.from_numpy(labels[idx]))  # noqa: E731
    return as_set(train), as_set(test)


def read_cifar_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickled CIFAR-10 batch → (uint8 images (N, 3, 32, 32), int64 labels (N,))."""
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
    return data, np.asarray(batch[b"labels"], dtype=np.int64)


def write_cifar_batch(path: str | Path, images: np.ndarray, labels: np.ndarray) -> None:
    """Write a batch in the CIFAR-10 python format (what the tests use to check the reader)."""
    flat = np.asarray(images, dtype=np.uint8).reshape(len(images), 3072)
    with open(path, "wb") as f:
        pickle.dump(
            {b"batch_label": b"book", b"data": flat, b"labels": [int(x) for x in labels]}, f
        )


class Cifar10(Dataset):
    """CIFAR-10 from the python-format files under ``root/cifar-10-batches-py``.

    ``augment``: the example's training transform, random crop of the image padded by 4 pixels
    and a random horizontal flip; every image is then normalised per channel.
    """

    def __init__(self, root: str | Path, train: bool, augment: bool = False):
        folder = Path(root) / CIFAR_FOLDER
        names = CIFAR_TRAIN if train else CIFAR_TEST
        missing = [n for n in names if not (folder / n).exists()]
        if missing:
            raise FileNotFoundError(
                f"CIFAR-10 is not under {folder} (missing {missing}); this machine cannot download "
                "it: copy the "
                "extracted cifar-10-python.tar.gz there, or point DATA at the folder that holds "
                f"{CIFAR_FOLDER}/"
            )
        parts = [read_cifar_batch(folder / n) for n in names]
        self.images = torch.from_numpy(
            np.concatenate([p[0] for p in parts])
        )  # (N, 3, 32, 32) uint8
        self.labels = torch.from_numpy(np.concatenate([p[1] for p in parts]))
        self.augment = augment
        self.mean = torch.tensor(CIFAR_MEAN).view(3, 1, 1)
        self.std = torch.tensor(CIFAR_STD).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.images[i].float() / 255.0  # (3, 32, 32)
        if self.augment:
            padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
            top, left = torch.randint(0, 9, (2,)).tolist()
            x = padded[:, top : top + 32, left : left + 32]
            if torch.rand(()) < 0.5:
                x = x.flip(-1)
        return (x - self.mean) / self.std, self.labels[i]


def datasets(name: str) -> tuple[Dataset, Dataset]:
    """(train, test) for ``--data digits`` or ``--data cifar10`` (read from $DATA)."""
    if name == "digits":
        return digits_datasets()
    if name == "cifar10":
        return Cifar10(data_root(), train=True, augment=True), Cifar10(data_root(), train=False)
    raise ValueError(f"unknown dataset {name!r}: digits or cifar10")
