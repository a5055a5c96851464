"""timm models, built by name with random weights (``pretrained=False``: nothing is downloaded)."""

from __future__ import annotations

from typing import Any

from torch import nn

from .torchvision_ops import ensure_torchvision

__all__ = ["deit_tiny"]


def deit_tiny(**overrides: Any) -> nn.Module:
    """DeiT-Tiny/16 (Touvron et al., 2021) as timm builds it, 5,717,416 parameters at 224x224 with 1000 classes;
    its blocks use timm's own ``LayerNorm``, which TorchScan recognizes."""
    ensure_torchvision()  # timm imports torchvision
    import timm

    return timm.create_model("deit_tiny_patch16_224", pretrained=False, **overrides)
