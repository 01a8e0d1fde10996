"""ResNet with torchvision's BasicBlock, built here (Chapter 9's ResNet demo).

He et al. 2016, "Deep Residual Learning for Image Recognition", Table 1: ResNet-18 is a stem,
four stages of two BasicBlocks (two 3×3 convolutions with batch norm and a shortcut, a 1×1
strided convolution where the shape changes) with 64, 128, 256, 512 channels, global average
pooling and one linear layer. Colossal-AI's example trains ``torchvision.models.resnet18
(num_classes=10)``; :func:`resnet18` with ``stem="imagenet"`` builds the same layers and the same
parameter count (11,181,642 for 10 classes) without needing torchvision.

The 8×8 digits are too small for the ImageNet stem (a stride-2 7×7 convolution and a max-pool
would leave 2×2 pixels before the first block), so ``stem="small"`` uses one 3×3 convolution
with stride 1, as ResNets for CIFAR do, and ``width`` scales every stage's channels.
"""

from __future__ import annotations

import torch
from torch import nn


class BasicBlock(nn.Module):
    """conv3×3-BN-ReLU-conv3×3-BN plus the shortcut, then ReLU (torchvision's BasicBlock)."""

    def __init__(self, in_channels: int, channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class ResNet(nn.Module):
    """stem → four stages of BasicBlocks (strides 1, 2, 2, 2) → global average pool → linear."""

    def __init__(
        self,
        blocks: tuple[int, ...] = (2, 2, 2, 2),
        num_classes: int = 10,
        in_channels: int = 3,
        width: int = 64,
        stem: str = "imagenet",
    ):
        super().__init__()
        if stem == "imagenet":
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, width, 7, 2, 3, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(3, 2, 1),
            )
        elif stem == "small":
            self.stem = nn.Sequential(
                nn.Conv2d(in_channels, width, 3, 1, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
            )
        else:
            raise ValueError(f"stem must be 'imagenet' or 'small', not {stem!r}")
        stages, channels = [], width
        for i, n in enumerate(blocks):
            out = width * 2**i
            stages += [BasicBlock(channels, out, stride=1 if i == 0 else 2)] + [
                BasicBlock(out, out) for _ in range(n - 1)
            ]
            channels = out
        self.layers = nn.Sequential(*stages)
        self.fc = nn.Linear(channels, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))  # (b, C, H', W')
        # global average pool as a mean: AdaptiveAvgPool2d's CUDA backward has no deterministic
        # kernel (torch.use_deterministic_algorithms refuses it), and Chapter 9 resumes bitwise
        return self.fc(x.mean(dim=(2, 3)))  # (b, classes)


def resnet18(
    num_classes: int = 10, in_channels: int = 3, width: int = 64, stem: str = "imagenet"
) -> ResNet:
    """ResNet-18: two BasicBlocks per stage."""
    return ResNet((2, 2, 2, 2), num_classes, in_channels, width, stem)


def model_for(data: str, seed: int = 0) -> ResNet:
    """The model each dataset trains, seeded so every rank and the eval script agree.

    cifar10: the example's ResNet-18 (3 channels, ImageNet stem, width 64).
    digits: ResNet-18 layout at width 8 with the small stem (1 grey channel).
    """
    torch.manual_seed(seed)
    if data == "cifar10":
        return resnet18(10, 3, 64, "imagenet")
    if data == "digits":
        return resnet18(10, 1, 8, "small")
    raise ValueError(f"unknown dataset {data!r}: digits or cifar10")


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
