"""Module estimates for dense layers: ``Linear`` (``LazyLinear`` once materialized), ``Bilinear`` and ``Identity``.

These layers act on the last (feature) dimension only, so along every leading token or spatial dimension they are
pointwise: receptive field 1, stride 1, padding 0. The dense cost rule (`dense_work`) lives here and is
shared with convolutions, which are dense products over sliding windows.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn

from ...handlers import ModuleCall, ModuleEstimates, ModuleHandler
from ..conventions import COMPLEX_ADD_REAL_FLOPS, COMPLEX_MAC_REAL_MACS
from ..estimates import POINTWISE

METHOD = "formula:linear"


def dense_work(macs: int, bias_adds: int, dtype: torch.dtype, dmas: int) -> ModuleEstimates:
    """FLOPs, MACs and DMAs of ``macs`` multiply-accumulates plus ``bias_adds`` bias additions in ``dtype``.

    Real floating point: 1 MAC = 2 FLOPs, 1 bias add = 1 FLOP. Complex: one complex MAC is 4 real MACs
    (8 real FLOPs, the 6 of a complex multiply plus the 2 of a complex add) and a bias add is 2 real FLOPs.
    Integer arithmetic is not floating point: its MACs are counted, its FLOPs are unavailable.
    """
    if dtype.is_complex:
        real_macs = COMPLEX_MAC_REAL_MACS * macs
        return {"module_flops": 2 * real_macs + COMPLEX_ADD_REAL_FLOPS * bias_adds, "macs": real_macs, "dmas": dmas}
    return {"module_flops": 2 * macs + bias_adds if dtype.is_floating_point else None, "macs": macs, "dmas": dmas}


def registered(module: nn.Module, name: str) -> torch.Tensor | None:
    """``module.<name>`` for a parameter or buffer the module registered itself (``None`` when registered as None),
    read from its registry rather than through ``nn.Module.__getattr__``'s fallback; anything else (a property, a
    parametrized weight) is read as an attribute."""
    if name in module._parameters:
        return module._parameters[name]
    if name in module._buffers:
        return module._buffers[name]
    return getattr(module, name, None)


def own_parameter_elements(module: nn.Module) -> int:
    """Elements of the parameters a layer reads itself (weight and bias; children excluded)."""
    own = {id(parameter): parameter for parameter in module._parameters.values() if parameter is not None}
    return sum(parameter.numel() for parameter in own.values())  # as parameters(recurse=False) lists them, faster


def estimate_linear(call: ModuleCall) -> ModuleEstimates:
    """y = x W^T + b over any number of leading dimensions: in_features MACs per output element."""
    module = cast(nn.Linear, call.module)  # HANDLERS registers each formula here for its own class only
    inputs, output = call.argument(0, "input"), call.output
    macs = output.numel() * module.in_features
    bias_adds = output.numel() if registered(module, "bias") is not None else 0
    dmas = inputs.numel() + own_parameter_elements(module) + output.numel()
    return {**dense_work(macs, bias_adds, output.dtype, dmas), **POINTWISE}


def estimate_bilinear(call: ModuleCall) -> ModuleEstimates:
    """y_k = x1^T A_k x2 + b_k, evaluated like PyTorch: x1 contracted with A first, then with x2.

    Per output element: in1 * in2 MACs for the first contraction and in2 for the second.
    """
    module, output = cast(nn.Bilinear, call.module), call.output
    first, second = call.argument(0, "input1"), call.argument(1, "input2")
    macs = output.numel() * module.in2_features * (module.in1_features + 1)
    bias_adds = output.numel() if registered(module, "bias") is not None else 0
    dmas = first.numel() + second.numel() + own_parameter_elements(module) + output.numel()
    return {**dense_work(macs, bias_adds, output.dtype, dmas), **POINTWISE}


def estimate_identity(call: ModuleCall) -> ModuleEstimates:
    """Returns its input object itself: no arithmetic and no element is read or written."""
    return {"module_flops": 0, "macs": 0, "dmas": 0, **POINTWISE}


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    nn.Linear: ModuleHandler(estimate_linear, method=METHOD, memoize=True),
    nn.Bilinear: ModuleHandler(estimate_bilinear, method=METHOD, memoize=True),
    nn.Identity: ModuleHandler(estimate_identity, method=METHOD, memoize=True),
}


#: The aten operators that each formula describes, for verified inheritance (see
#: `torchscan.inheritance`): a linear layer runs ``addmm``, or ``mm``/``bmm`` and its bias ``add``.
OPERATORS: dict[type[nn.Module], tuple[str, ...]] = {
    nn.Linear: ("aten.addmm", "aten.mm", "aten.bmm", "aten.add", "aten.add_"),
    nn.Bilinear: ("aten._trilinear", "aten.add"),
    nn.Identity: (),
}
