"""One iteration of a training loop, as the analyses run it: the loss of the output, and the optimizer in the
implementation its device picks.

Shared by the single-device step (`torchscan.training.step`) and the sharded one (`torchscan.parallel.step`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..values import tensors_in

#: The named optimizers; each leaves ``foreach`` unset, so that the implementation is the device's default.
OPTIMIZERS: dict[str, Callable[[list[torch.Tensor]], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params),
    "adamw": lambda params: torch.optim.AdamW(params),
}
#: Device types with foreach kernels, where ``torch.optim`` defaults to ``foreach`` (its
#: ``_default_to_fused_or_foreach`` asks ``torch.utils._foreach_utils._get_foreach_kernels_supported_devices``).
FOREACH_DEVICE_TYPES = ("cuda", "xpu", "mtia")


def optimizer_factory(optimizer: Any) -> Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None:
    """The optimizer to build, checked: None, a known name, or a callable ``params -> Optimizer``."""
    if optimizer is None or callable(optimizer):
        return optimizer
    if isinstance(optimizer, str) and optimizer in OPTIMIZERS:
        return OPTIMIZERS[optimizer]
    raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)} or a callable params -> torch.optim.Optimizer, "
                     f"got {optimizer!r}")


def device_picks_foreach(device: torch.device, meta_kernels: str | None = "accelerator") -> bool:
    """Whether ``torch.optim`` runs the ``foreach`` implementation by default on ``device``: on devices with foreach
    kernels it does, on CPU it does not, and meta stands for an accelerator run when the analysis takes an
    accelerator's kernels there (``meta_kernels="accelerator"``, `torchscan.calls.meta_kernels`)."""
    if device.type == "meta":
        return meta_kernels == "accelerator"
    return device.type in FOREACH_DEVICE_TYPES


def settle_implementation(optimizer: torch.optim.Optimizer, foreach: bool) -> str:
    """Where the caller left ``foreach`` unset, set the device's default, as ``torch.optim`` decides it on the device
    (the stand-ins are on meta, where it would pick single-tensor); returns the `implementation` that runs."""
    for group in optimizer.param_groups:
        if not group.get("fused") and "foreach" in group and group["foreach"] is None:
            group["foreach"] = foreach
    return implementation(optimizer)


def implementation(optimizer: torch.optim.Optimizer) -> str:
    """``fused``, ``foreach`` or ``single_tensor``, joined by ``+`` when param groups differ."""
    chosen = {"fused" if group.get("fused") else "foreach" if group.get("foreach") else "single_tensor"
              for group in optimizer.param_groups}
    return "+".join(sorted(chosen)) or "single_tensor"


def compute_loss(loss: Callable[[Any], Any] | None, output: Any) -> torch.Tensor:
    """The caller's loss of the output, checked, or the default: the sum of the floating output tensors needing grad."""
    if loss is None:
        floats = [t for t in tensors_in(output) if t.is_floating_point() and t.requires_grad]
        if not floats:
            raise ValueError("the default loss found no floating-point output tensor that requires grad; pass "
                             "loss=callable(output) -> scalar tensor")
        value = floats[0].sum()
        for tensor in floats[1:]:
            value = value + tensor.sum()
        return value
    value = loss(output)
    if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.requires_grad):
        shape = f" of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else ""
        raise TypeError(f"loss must return a one-element tensor that requires grad, got {type(value).__name__}{shape}")
    return value
