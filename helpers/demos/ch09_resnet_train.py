"""Chapter 9: Colossal-AI's ResNet quick demo (examples/images/resnet/train.py), same options.

    torchrun --standalone --nproc_per_node 1 -m helpers.demos.ch09_resnet_train -c ./ckpt-single
    torchrun --standalone --nproc_per_node 2 -m helpers.demos.ch09_resnet_train -c ./ckpt-dp
    ... -p {torch_ddp,torch_ddp_fp16,low_level_zero,gemini} -r EPOCH -i N --target_acc 0.9

The Booster path is the example's (:mod:`helpers.train.resnet`): ``plugin.prepare_dataloader``
shards the data over the ranks, the learning rate is multiplied by the world size
(``old_gpu_num / old_lr = new_gpu_num / new_lr``), ``booster.boost`` wraps model, optimizer,
criterion and a MultiStepLR (÷3 at a quarter, half, three quarters and the end of the run, i.e.
[20, 40, 60, 80] for 80 epochs), ``booster.backward`` replaces ``loss.backward``, and
``booster.save_*``/``load_*`` write and read
``model_E.pth``/``optimizer_E.pth``/``lr_scheduler_E.pth`` every ``--interval`` epochs.
Nothing in this file depends on the number of processes: data parallelism is the launcher's
``--nproc_per_node``. ``--data cifar10`` reads CIFAR-10 from ``$DATA`` (helpers.models.data);
``--data digits`` trains on the real 8×8 handwritten digits that scikit-learn ships.

The optimizer is the example's HybridAdam on GPUs; on the CPU it is torch.optim.Adam (HybridAdam
has no CPU path in Colossal-AI 0.5.0 without its compiled kernel) and only ``torch_ddp`` runs
(fp16, ZeRO and Gemini need CUDA): other plugins stop with that reason.
"""

import os

import torch
import torch.distributed as dist
from torch import nn
from torch.optim.lr_scheduler import MultiStepLR

from helpers.models.data import datasets
from helpers.models.resnet import model_for
from helpers.run.env import deterministic, distributed, emit, say
from helpers.run.result_types.ch09 import ResnetTrainResult
from helpers.train.resnet import (
    BATCH_SIZE,
    LEARNING_RATE,
    evaluate,
    load_epoch,
    local_batchnorm_on_cpu,
    make_booster,
    make_optimizer,
    parser,
    save_epoch,
    steady_mean,
    train_epoch,
)


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
            load_epoch(booster, model, optimizer, scheduler, args.checkpoint, args.resume)
            start_epoch = args.resume
        losses, speeds = [], []
        for epoch in range(start_epoch, args.epochs):
            # a new shuffle each epoch, the same on every rank
            train_loader.sampler.set_epoch(epoch)
            loss, speed = train_epoch(
                model, optimizer, criterion, train_loader, booster, env.device
            )
            scheduler.step()
            losses.append(loss)
            speeds.append(speed)
            if coordinator.is_master():
                lr_now = scheduler.get_last_lr()[0]
                say(f"epoch {epoch + 1}/{args.epochs}: loss {loss:.4f}, lr {lr_now:.2e}")
            if args.interval > 0 and (epoch + 1) % args.interval == 0:
                save_epoch(booster, model, optimizer, scheduler, args.checkpoint, epoch + 1)
        accuracy = evaluate(model, test_loader, env.device, len(test_set))
        if coordinator.is_master():
            n = len(test_set)
            say(f"Accuracy of the model on the {n} test images: {accuracy * 100:.2f} %")
            memory = torch.cuda.max_memory_allocated(env.device) / 2**20 if env.is_gpu else 0.0
            emit(
                ResnetTrainResult,
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
        # free the DDP reducer before the teardown (helpers.run.env.distributed)
        del model, optimizer, booster
        dist.barrier()


if __name__ == "__main__":
    main()
