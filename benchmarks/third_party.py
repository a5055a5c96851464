"""Third-party models for the overhead benchmark, built from configs with random initialization (no downloads).

torchvision's CUDA wheel cannot load its C extension here, and ``import torchvision`` then fails on the missing
``torchvision::nms`` operator. `define_torchvision_ops` defines ``nms`` and ``qnms`` with plain Python CPU
kernels before the import, which is all the model classes need.
"""

from __future__ import annotations

import torch

_LIBRARY: torch.library.Library | None = None  # kept alive: dropping it would unregister the operators


def _nms(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression: indices of kept boxes (x1, y1, x2, y2), by decreasing score."""
    order = scores.argsort(descending=True)
    areas = (dets[:, 2] - dets[:, 0]).clamp(min=0) * (dets[:, 3] - dets[:, 1]).clamp(min=0)
    suppressed = torch.zeros(len(dets), dtype=torch.bool)
    keep = []
    for index in order.tolist():
        if suppressed[index]:
            continue
        keep.append(index)
        top_left = torch.maximum(dets[index, :2], dets[:, :2])
        bottom_right = torch.minimum(dets[index, 2:], dets[:, 2:])
        inter = (bottom_right - top_left).clamp(min=0).prod(dim=1)
        suppressed |= inter / (areas[index] + areas - inter) > iou_threshold
    return torch.tensor(keep, dtype=torch.int64)


def _defined(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(name, "")
    except RuntimeError:
        return False
    return True


def define_torchvision_ops() -> None:
    """Define ``torchvision::nms``/``qnms`` (CPU kernels in Python) unless torchvision's extension already did."""
    global _LIBRARY
    if _LIBRARY is not None or _defined("torchvision::nms"):
        return
    _LIBRARY = torch.library.Library("torchvision", "DEF")
    for name in ("nms", "qnms"):
        _LIBRARY.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _LIBRARY.impl(name, _nms, "CPU")


def torchvision_resnet50(size: int = 224, batch: int = 1) -> tuple[torch.nn.Module, tuple, dict]:
    """torchvision's ResNet-50, random init, ``batch`` seeded ``size`` x ``size`` images (one 224x224 by default)."""
    define_torchvision_ops()
    import torchvision

    generator = torch.Generator().manual_seed(0)
    return torchvision.models.resnet50(), (torch.rand(batch, 3, size, size, generator=generator),), {}


def transformers_bert_base(seq_len: int = 128, batch: int = 1) -> tuple[torch.nn.Module, tuple, dict]:
    """transformers' ``BertModel`` with the bert-base-uncased config, random init, ``batch`` rows of ``seq_len``
    tokens whose last quarter is padding (one 128-token row by default)."""
    define_torchvision_ops()  # transformers imports torchvision
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig())
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1000, 30522, (batch, seq_len), generator=generator)
    attention_mask = torch.ones(batch, seq_len, dtype=torch.int64)
    attention_mask[:, (3 * seq_len) // 4:] = 0
    return model, (input_ids,), {"attention_mask": attention_mask}
