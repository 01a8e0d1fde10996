"""Chapter 9: Colossal-AI's ResNet quick demo (examples/images/resnet/train.py), same options.

    torchrun --standalone --nproc_per_node 1 -m helpers.demos.ch09_resnet_train -c ./ckpt-single
    torchrun --standalone --nproc_per_node 2 -m helpers.demos.ch09_resnet_train -c ./ckpt-dp
    ... -p {torch_ddp,torch_ddp_fp16,low_level_zero,gemini} -r EPOCH -i N --target_acc 0.9

The Booster path is the example's: ``plugin.prepare_dataloader`` shards the data over the ranks,
the learning rate is multiplied by the world size (``old_gpu_num / old_lr = new_gpu_num / new_lr``),
``booster.boost`` wraps model, optimizer, criterion and a MultiStepLR (÷3 at a quarter, half,
three quarters and the end of the run, i.e. [20, 40, 60, 80] for 80 epochs), ``booster.backward``
replaces ``loss.backward``, and ``booster.save_*``/``load_*`` write and read
``model_E.pth``/``optimizer_E.pth``/``lr_scheduler_E.pth`` every ``--interval`` epochs.
Nothing in this file depends on the number of processes: data parallelism is the launcher's
``--nproc_per_node``. ``--data cifar10`` reads CIFAR-10 from ``$DATA`` (helpers.models.data);
``--data digits`` trains on the real 8×8 handwritten digits that scikit-learn ships.

The optimizer is the example's HybridAdam on GPUs; on the CPU it is torch.optim.Adam (HybridAdam
has no CPU path in Colossal-AI 0.5.0 without its compiled kernel) and only ``torch_ddp`` runs
(fp16, ZeRO and Gemini need CUDA): other plugins stop with that reason.
"""

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.optim.lr_scheduler import MultiStepLR

from helpers.run.env import deterministic, distributed, emit, say, sync
from helpers.models.data import datasets
from helpers.models.resnet import model_for

PLUGINS = ("torch_ddp", "torch_ddp_fp16", "low_level_zero", "gemini")
BATCH_SIZE = 100  # per process, as in the example
LEARNING_RATE = 1e-3  # for one process; scaled by the world size


def make_booster(name: str, is_gpu: bool):
    from colossalai.booster import Booster
    from colossalai.booster.plugin import GeminiPlugin, LowLevelZeroPlugin, TorchDDPPlugin

    if not is_gpu and name != "torch_ddp":
        raise SystemExit(
            f"plugin {name} needs CUDA GPUs in Colossal-AI 0.5.0 (fp16, ZeRO and Gemini have no CPU "
            "path); on the CPU use -p torch_ddp"
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
    """Mean images/s without the first epoch (warm-up: allocator, kernels, JIT), when there are more."""
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
    """One pass over this rank's shard: (mean loss over all ranks, images per second, all ranks)."""
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


def parser() -> argparse.ArgumentParser:
    """The command line (the recorder's tests parse its run lists with it)."""
    p = argparse.ArgumentParser(
        prog="python -m helpers.demos.ch09_resnet_train", description=__doc__.split("\n")[0]
    )
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


def main() -> None:
    args = parser().parse_args()
    with distributed() as env:
        from colossalai.cluster import DistCoordinator

        deterministic()  # the resume below is bitwise on the GPU too

        coordinator = DistCoordinator()
        lr = LEARNING_RATE * coordinator.world_size  # old_gpu_num / old_lr = new_gpu_num / new_lr
        plugin, booster = make_booster(args.plugin, env.is_gpu)
        train_set, test_set = datasets(args.data)
        train_loader = plugin.prepare_dataloader(
            train_set, batch_size=BATCH_SIZE, shuffle=True, drop_last=True
        )
        test_loader = plugin.prepare_dataloader(
            test_set, batch_size=BATCH_SIZE, shuffle=False, drop_last=False
        )
        model = model_for(args.data).to(env.device)
        optim_name = args.optim or ("hybrid_adam" if env.is_gpu else "adam")
        optimizer = make_optimizer(model.parameters(), lr, optim_name)
        milestones = [round(args.epochs * k / 4) for k in (1, 2, 3, 4)]
        scheduler = MultiStepLR(optimizer, milestones=milestones, gamma=1 / 3)
        criterion = nn.CrossEntropyLoss()
        with local_batchnorm_on_cpu(env.is_gpu):
            model, optimizer, criterion, _, scheduler = booster.boost(
                model, optimizer, criterion=criterion, lr_scheduler=scheduler
            )
        if args.interval > 0:
            os.makedirs(args.checkpoint, exist_ok=True)
        start_epoch = 0
        if args.resume >= 0:
            booster.load_model(model, f"{args.checkpoint}/model_{args.resume}.pth")
            booster.load_optimizer(optimizer, f"{args.checkpoint}/optimizer_{args.resume}.pth")
            booster.load_lr_scheduler(
                scheduler, f"{args.checkpoint}/lr_scheduler_{args.resume}.pth"
            )
            start_epoch = args.resume
        losses, speeds = [], []
        for epoch in range(start_epoch, args.epochs):
            train_loader.sampler.set_epoch(
                epoch
            )  # a new shuffle each epoch, the same on every rank
            loss, speed = train_epoch(
                model, optimizer, criterion, train_loader, booster, env.device
            )
            scheduler.step()
            losses.append(loss)
            speeds.append(speed)
            if coordinator.is_master():
                say(
                    f"epoch {epoch + 1}/{args.epochs}: loss {loss:.4f}, lr {scheduler.get_last_lr()[0]:.2e}"
                )
            if args.interval > 0 and (epoch + 1) % args.interval == 0:
                booster.save_model(model, f"{args.checkpoint}/model_{epoch + 1}.pth")
                booster.save_optimizer(optimizer, f"{args.checkpoint}/optimizer_{epoch + 1}.pth")
                booster.save_lr_scheduler(
                    scheduler, f"{args.checkpoint}/lr_scheduler_{epoch + 1}.pth"
                )
        accuracy = evaluate(model, test_loader, env.device, len(test_set))
        if coordinator.is_master():
            say(f"Accuracy of the model on the {len(test_set)} test images: {accuracy * 100:.2f} %")
            memory = torch.cuda.max_memory_allocated(env.device) / 2**20 if env.is_gpu else 0.0
            emit(
                plugin=args.plugin,
                data=args.data,
                world_size=env.world_size,
                epochs=args.epochs,
                start_epoch=start_epoch,
                lr=lr,
                optimizer=optim_name,
                milestones=milestones,
                losses=[round(x, 4) for x in losses],
                accuracy=round(accuracy, 4),
                images_per_s=round(steady_mean(speeds)),
                peak_mib=round(memory, 1),
                backend=env.backend,
                sync_batchnorm=any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules()),
            )
        if args.target_acc is not None:
            assert accuracy >= args.target_acc, (
                f"Accuracy {accuracy} is lower than target accuracy {args.target_acc}"
            )
        del model, optimizer, booster  # known-facts: free the DDP reducer before the teardown
        dist.barrier()


if __name__ == "__main__":
    main()
