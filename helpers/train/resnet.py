"""Chapter 9's ResNet quick demo (examples/images/resnet/train.py and eval.py): the example's
options, plugins, optimizer and epoch loop.

Used by ``helpers/demos/ch09_resnet_train.py`` and ``ch09_resnet_eval.py``; the recorder parses
its run lists with :func:`parser`. The Booster path is the example's: ``plugin.prepare_dataloader``
shards the data over the ranks, ``booster.backward`` replaces ``loss.backward``. The optimizer is
the example's HybridAdam on GPUs; on the CPU it is torch.optim.Adam (HybridAdam has no CPU path in
Colossal-AI 0.5.0 without its compiled kernel) and only ``torch_ddp`` runs (:func:`make_booster`).
"""

from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from helpers.run import cli
from helpers.run.env import sync

DESCRIPTION = (
    "Chapter 9: Colossal-AI's ResNet quick demo (examples/images/resnet/train.py), same options."
)
PLUGINS = ("torch_ddp", "torch_ddp_fp16", "low_level_zero", "gemini")
BATCH_SIZE = 100  # per process, as in the example
LEARNING_RATE = 1e-3  # for one process; scaled by the world size


def make_booster(name: str, is_gpu: bool):
    from colossalai.booster import Booster
    from colossalai.booster.plugin import GeminiPlugin, LowLevelZeroPlugin, TorchDDPPlugin

    if not is_gpu and name != "torch_ddp":
        raise SystemExit(
            f"plugin {name} needs CUDA GPUs in Colossal-AI 0.5.0 (fp16, ZeRO and Gemini have no "
            "CPU path); on the CPU use -p torch_ddp"
        )
    kwargs = {"mixed_precision": "fp16"} if name == "torch_ddp_fp16" else {}
    if name.startswith("torch_ddp"):
        plugin = TorchDDPPlugin()
    elif name == "gemini":
        plugin = GeminiPlugin(placement_policy="static", strict_ddp_mode=True, initial_scale=2**5)
    else:
        plugin = LowLevelZeroPlugin(initial_scale=2**5)
    return plugin, Booster(plugin=plugin, **kwargs)


@contextlib.contextmanager
def local_batchnorm_on_cpu(is_gpu: bool):
    """TorchDDPPlugin.configure turns every BatchNorm into SyncBatchNorm (torch_ddp_plugin.py:
    ``nn.SyncBatchNorm.convert_sync_batchnorm(model, None)``), so on GPUs the batch statistics are
    taken over the global batch. PyTorch's DDP refuses SyncBatchNorm on CPU modules ("SyncBatchNorm
    layers only work with GPU modules"); on the CPU only, the conversion is skipped while boosting
    and each rank normalises over its own images, as plain DDP without SyncBatchNorm does."""
    if is_gpu:
        yield
        return
    original = torch.nn.SyncBatchNorm.convert_sync_batchnorm
    torch.nn.SyncBatchNorm.convert_sync_batchnorm = staticmethod(
        lambda module, process_group=None: module
    )
    try:
        yield
    finally:
        torch.nn.SyncBatchNorm.convert_sync_batchnorm = original


def make_optimizer(params, lr: float, name: str):
    if name == "hybrid_adam":
        from colossalai.nn.optimizer import HybridAdam

        return HybridAdam(params, lr=lr)
    return torch.optim.Adam(params, lr=lr)


def steady_mean(speeds: list[float]) -> float:
    """Mean images/s without the first epoch (warm-up: allocator, kernels, JIT), when there are
    more."""
    steady = speeds[1:] or speeds
    return sum(steady) / len(steady) if steady else 0.0


@torch.no_grad()
def evaluate(model, loader, device, n_test: int) -> float:
    """Exact test accuracy over all ranks. The distributed sampler pads the last round with
    repeated images so every rank runs the same number of batches; those repeats (global
    position >= n_test) are not counted."""
    model.eval()
    rank, world = dist.get_rank(), dist.get_world_size()
    counts = torch.zeros(2, dtype=torch.int64, device=device)  # (correct, total)
    seen = 0
    for images, labels in loader:
        positions = rank + world * (seen + torch.arange(len(labels)))
        keep = (positions < n_test).to(device)
        hits = model(images.to(device)).argmax(dim=1) == labels.to(device)
        counts += torch.stack([(hits & keep).sum(), keep.sum()])
        seen += len(labels)
    dist.all_reduce(counts)
    model.train()
    return counts[0].item() / counts[1].item()


def train_epoch(model, optimizer, criterion, loader, booster, device) -> tuple[float, float]:
    """One pass over this rank's shard: (mean loss over all ranks, images per second, all
    ranks)."""
    model.train()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # (loss sum, images)
    sync(device)
    start = time.perf_counter()
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        loss = criterion(model(images), labels)
        booster.backward(loss, optimizer)
        optimizer.step()
        optimizer.zero_grad()
        total += torch.stack(
            [
                loss.detach().double() * len(labels),
                torch.tensor(len(labels), device=device).double(),
            ]
        )
    sync(device)
    seconds = time.perf_counter() - start
    dist.all_reduce(total)
    return (total[0] / total[1]).item(), total[1].item() / seconds


def parser():
    """The command line (the recorder's tests parse its run lists with it)."""
    p = cli.parser(DESCRIPTION, prog="python -m helpers.demos.ch09_resnet_train")
    p.add_argument("-p", "--plugin", choices=PLUGINS, default="torch_ddp")
    p.add_argument(
        "-r", "--resume", type=int, default=-1, help="epoch to resume from (-1: start afresh)"
    )
    p.add_argument("-c", "--checkpoint", default="./checkpoint", help="checkpoint folder")
    p.add_argument("-i", "--interval", type=int, default=5, help="save every N epochs (0: never)")
    p.add_argument(
        "--target_acc", type=float, default=None, help="fail if the final test accuracy is lower"
    )
    p.add_argument(
        "--data",
        choices=("digits", "cifar10"),
        default="cifar10",
        help="cifar10 from $DATA (the example's), or scikit-learn's handwritten digits",
    )
    p.add_argument("--epochs", type=int, default=80, help="the example's NUM_EPOCHS")
    p.add_argument(
        "--optim",
        choices=("hybrid_adam", "adam"),
        default=None,
        help="default: hybrid_adam on GPUs (the example's), adam on the CPU",
    )
    return p


@torch.no_grad()
def accuracy(model, test_set, device, batch_size: int = 100) -> float:
    """Test accuracy in one process (the evaluation script's)."""
    model.eval()
    correct = 0
    for images, labels in DataLoader(test_set, batch_size=batch_size, shuffle=False):
        correct += (model(images.to(device)).argmax(dim=1).cpu() == labels).sum().item()
    return correct / len(test_set)


def save_epoch(booster, model, optimizer, scheduler, folder: str, epoch: int) -> None:
    """``model_E.pth``, ``optimizer_E.pth`` and ``lr_scheduler_E.pth``, as the example writes
    them."""
    booster.save_model(model, f"{folder}/model_{epoch}.pth")
    booster.save_optimizer(optimizer, f"{folder}/optimizer_{epoch}.pth")
    booster.save_lr_scheduler(scheduler, f"{folder}/lr_scheduler_{epoch}.pth")


def load_epoch(booster, model, optimizer, scheduler, folder: str, epoch: int) -> None:
    """The three files :func:`save_epoch` wrote after ``epoch``, back into the boosted objects."""
    booster.load_model(model, f"{folder}/model_{epoch}.pth")
    booster.load_optimizer(optimizer, f"{folder}/optimizer_{epoch}.pth")
    booster.load_lr_scheduler(scheduler, f"{folder}/lr_scheduler_{epoch}.pth")
