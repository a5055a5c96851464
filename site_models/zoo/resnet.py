"""ResNet (He et al., 2015, "Deep Residual Learning for Image Recognition") as torchvision builds it.

Same layer shapes and parameter counts as ``torchvision.models.resnet``: a 7x7/2 stem with max pooling, four
stages of BasicBlock (ResNet-18/34) or Bottleneck (ResNet-50/101, stride on the 3x3 conv, "ResNet v1.5"), a
1x1 conv + BatchNorm shortcut wherever the shape changes, global average pooling and a linear classifier.
Bottleneck ``groups`` and ``width_per_group`` give the ResNeXt and Wide-ResNet variants of the same family.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnext50_32x4d",
    "wide_resnet50_2",
]


def conv3x3(in_channels: int, out_channels: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    """3x3 convolution with padding 1 and no bias (BatchNorm follows)."""
    return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, groups=groups, bias=False)


def conv1x1(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution with no bias (BatchNorm follows)."""
    return nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection; the first conv carries the stride."""

    expansion = 1

    def __init__(
        self,
        in_channels: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        width_per_group: int = 64,
    ) -> None:
        super().__init__()
        if groups != 1 or width_per_group != 64:
            raise ValueError("BasicBlock supports only groups=1 and width_per_group=64")
        self.conv1 = conv3x3(in_channels, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided, optionally grouped), 1x1 expand by 4, with a residual connection."""

    expansion = 4

    def __init__(
        self,
        in_channels: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        width_per_group: int = 64,
    ) -> None:
        super().__init__()
        width = int(planes * (width_per_group / 64.0)) * groups
        self.conv1 = conv1x1(in_channels, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride, groups)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Stem, four residual stages (64, 128, 256, 512 planes), global average pooling, linear head."""

    def __init__(
        self,
        block: type[BasicBlock | Bottleneck],
        layers: list[int],
        num_classes: int = 1000,
        groups: int = 1,
        width_per_group: int = 64,
    ) -> None:
        super().__init__()
        self.block = block
        self.groups = groups
        self.width_per_group = width_per_group
        self.in_channels = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_stage(64, layers[0], stride=1)
        self.layer2 = self._make_stage(128, layers[1], stride=2)
        self.layer3 = self._make_stage(256, layers[2], stride=2)
        self.layer4 = self._make_stage(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.flatten = nn.Flatten(1)
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_stage(self, planes: int, num_blocks: int, stride: int) -> nn.Sequential:
        """One stage: the first block changes stride/width (with a projection shortcut), the rest keep it."""
        out_channels = planes * self.block.expansion
        downsample = None
        if stride != 1 or self.in_channels != out_channels:
            downsample = nn.Sequential(conv1x1(self.in_channels, out_channels, stride), nn.BatchNorm2d(out_channels))
        options = {"groups": self.groups, "width_per_group": self.width_per_group}
        blocks = [self.block(self.in_channels, planes, stride, downsample, **options)]
        self.in_channels = out_channels
        blocks += [self.block(out_channels, planes, **options) for _ in range(1, num_blocks)]
        return nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.flatten(self.avgpool(x)))


def resnet18(num_classes: int = 1000) -> ResNet:
    """ResNet-18: BasicBlock x [2, 2, 2, 2]; 11,689,512 parameters with 1000 classes."""
    return ResNet(BasicBlock, [2, 2, 2, 2], num_classes=num_classes)


def resnet34(num_classes: int = 1000) -> ResNet:
    """ResNet-34: BasicBlock x [3, 4, 6, 3]; 21,797,672 parameters with 1000 classes."""
    return ResNet(BasicBlock, [3, 4, 6, 3], num_classes=num_classes)


def resnet50(num_classes: int = 1000, groups: int = 1, width_per_group: int = 64) -> ResNet:
    """ResNet-50: Bottleneck x [3, 4, 6, 3]; 25,557,032 parameters with 1000 classes.

    ``groups=32, width_per_group=4`` gives ResNeXt-50 32x4d, ``width_per_group=128`` Wide ResNet-50-2.
    """
    return ResNet(Bottleneck, [3, 4, 6, 3], num_classes=num_classes, groups=groups, width_per_group=width_per_group)


def resnet101(num_classes: int = 1000, groups: int = 1, width_per_group: int = 64) -> ResNet:
    """ResNet-101: Bottleneck x [3, 4, 23, 3]; 44,549,160 parameters with 1000 classes."""
    return ResNet(Bottleneck, [3, 4, 23, 3], num_classes=num_classes, groups=groups, width_per_group=width_per_group)


def resnext50_32x4d(num_classes: int = 1000) -> ResNet:
    """ResNeXt-50 32x4d (Xie et al., 2016): ResNet-50 with 32-group 3x3 convs; 25,028,904 parameters."""
    return resnet50(num_classes=num_classes, groups=32, width_per_group=4)


def wide_resnet50_2(num_classes: int = 1000) -> ResNet:
    """Wide ResNet-50-2 (Zagoruyko and Komodakis, 2016): bottleneck width doubled; 68,883,240 parameters."""
    return resnet50(num_classes=num_classes, width_per_group=128)
