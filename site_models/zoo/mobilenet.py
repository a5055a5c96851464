"""MobileNetV2 (Sandler et al., 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks") as torchvision
builds it.

Same layer shapes and parameter count as ``torchvision.models.mobilenet_v2``: a 3x3/2 stem, seventeen inverted
residual blocks (1x1 expansion, 3x3 depthwise, linear 1x1 projection, identity shortcut when shapes match), a 1x1
conv to 1280 channels, global average pooling, dropout and a linear classifier. Channel counts are scaled by
``width_mult`` and rounded to multiples of 8 with torchvision's rounding rule.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["ConvBNReLU6", "InvertedResidual", "MobileNetV2", "make_divisible", "mobilenet_v2"]

# (expansion t, output channels c, repeats n, first stride s) of the paper's Table 2.
INVERTED_RESIDUAL_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def make_divisible(value: float, divisor: int = 8) -> int:
    """Round ``value`` to the nearest multiple of ``divisor``, never dropping more than 10% below it."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * value:
        rounded += divisor
    return rounded


class ConvBNReLU6(nn.Sequential):
    """Conv2d (no bias, "same" padding) + BatchNorm2d + ReLU6."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: int = 1, groups: int = 1):
        padding = (kernel_size - 1) // 2
        super().__init__(
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, padding, groups=groups, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    """Expand (1x1), filter (3x3 depthwise), project (linear 1x1); adds the input when stride is 1 and widths match."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = round(in_channels * expand_ratio)
        self.use_residual = stride == 1 and in_channels == out_channels
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(in_channels, hidden, kernel_size=1))
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, out_channels, 1, bias=False),
            nn.BatchNorm2d(out_channels),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_residual:
            return x + self.conv(x)
        return self.conv(x)


class MobileNetV2(nn.Module):
    """Feature extractor of inverted residual blocks followed by pooling, dropout and a linear classifier."""

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2) -> None:
        super().__init__()
        in_channels = make_divisible(32 * width_mult)
        last_channels = make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, in_channels, stride=2)]
        for expand_ratio, channels, repeats, first_stride in INVERTED_RESIDUAL_SETTING:
            out_channels = make_divisible(channels * width_mult)
            for index in range(repeats):
                stride = first_stride if index == 0 else 1
                features.append(InvertedResidual(in_channels, out_channels, stride, expand_ratio))
                in_channels = out_channels
        features.append(ConvBNReLU6(in_channels, last_channels, kernel_size=1))
        self.features = nn.Sequential(*features)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.flatten = nn.Flatten(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last_channels, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.flatten(self.avgpool(self.features(x))))


def mobilenet_v2(num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2) -> MobileNetV2:
    """MobileNetV2; 3,504,872 parameters at width 1.0 with 1000 classes."""
    return MobileNetV2(num_classes=num_classes, width_mult=width_mult, dropout=dropout)
