"""The loss that the training benchmarks share: one scalar from whatever a model returns, the same for every model.

The first tensor of the output (a tuple's first item, a dict's or ``ModelOutput``'s first tensor value) is taken:
logits (last dimension of at least 8) get the cross-entropy against fixed class-0 targets, anything else the mean
squared error against zeros. Both benchmarks (``training_coverage.py``, ``training.py``) pass it to the plain step
and to the analysis alike, so both run the same loss.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def first_tensor(out: Any) -> torch.Tensor:
    """The first tensor of a model's output: itself, a mapping's first tensor value, or a sequence's first item's."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict) or hasattr(out, "values"):
        return next(v for v in out.values() if isinstance(v, torch.Tensor))
    return first_tensor(out[0])


def loss_of(out: Any) -> torch.Tensor:
    """Cross-entropy of logits against class 0, or the mean squared error against zeros (see the module docstring)."""
    tensor = first_tensor(out).float()
    if tensor.dim() >= 2 and tensor.shape[-1] >= 8:  # logits: cross-entropy on fixed targets
        logits = tensor.reshape(-1, tensor.shape[-1])
        return F.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long, device=tensor.device))
    return F.mse_loss(tensor, torch.zeros_like(tensor))
