"""Make ``torchvision`` importable where its compiled operators do not load (timm and transformers import it).

A torchvision wheel built for another torch (the CUDA wheel next to a CPU torch, for instance) fails at import on
``torchvision::nms``. Classification models never call it, so this module defines ``torchvision::nms`` and
``torchvision::qnms`` as plain Python CPU kernels through ``torch.library`` in that case, and imports torchvision
again. Where torchvision loads normally, `ensure_torchvision` only imports it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import torch

_KERNELS: list[torch.library.Library] = []


def _nms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression: indices of the kept boxes, by decreasing score."""
    order = scores.argsort(descending=True)
    area = (boxes[:, 2:] - boxes[:, :2]).clamp(min=0).prod(dim=1)
    keep: list[int] = []
    while order.numel():
        best, order = order[0], order[1:]
        keep.append(int(best))
        top_left = torch.maximum(boxes[best, :2], boxes[order, :2])
        bottom_right = torch.minimum(boxes[best, 2:], boxes[order, 2:])
        overlap = (bottom_right - top_left).clamp(min=0).prod(dim=1)
        order = order[overlap / (area[best] + area[order] - overlap) <= iou_threshold]
    return torch.tensor(keep, dtype=torch.long)


def _qnms(boxes: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    return _nms(boxes.dequantize(), scores.dequantize(), iou_threshold)


def ensure_torchvision() -> Any:
    """torchvision, imported, with Python detection kernels if its own did not load."""
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as error:
        if "torchvision::nms" not in str(error):
            raise
    for name in [name for name in sys.modules if name == "torchvision" or name.startswith("torchvision.")]:
        del sys.modules[name]
    library = torch.library.Library("torchvision", "FRAGMENT")
    for name, kernel in (("nms", _nms), ("qnms", _qnms)):
        library.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        library.impl(name, kernel, "CPU")
    _KERNELS.append(library)
    return importlib.import_module("torchvision")
