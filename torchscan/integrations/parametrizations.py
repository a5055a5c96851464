"""PyTorch's own parametrization modules, which are private classes: matched by qualified name like a library's.

``torch.nn.utils.parametrizations.weight_norm`` (Wav2Vec2's positional convolution, many vocoders) recomputes the
weight at every forward in a ``_WeightNorm`` child call, before the layer reads it.
"""

from __future__ import annotations

from ..handlers import ModuleCall, ModuleEstimates
from ..operator_check import ThirdPartyHandler
from .common import NO_SPATIAL_MEANING, FamilyRule, handler, real_flops, signature

METHOD = "formula:torch.parametrization"


def _weight_norm(call: ModuleCall) -> ModuleEstimates:
    """``w = v * (g / ||v||)`` with one 2-norm per slice along ``dim`` (a group of n elements): n squares, n - 1
    additions and a square root per norm (2n), one division per norm and one multiply per element. Reads ``g`` and
    ``v``, writes ``w``. A parameter transform has no spatial input: receptive fields do not apply."""
    weight_g, weight_v = call.argument(0, "weight_g"), call.argument(1, "weight_v")
    groups = weight_g.numel()
    per_group = weight_v.numel() // groups if groups else 0
    flops = groups * (2 * per_group + 1) + weight_v.numel()
    return {"module_flops": real_flops(flops, weight_v), "macs": 0,
            "dmas": weight_g.numel() + weight_v.numel() + call.output.numel(), **NO_SPATIAL_MEANING}


#: Qualified class name -> handler.
HANDLERS: dict[str, ThirdPartyHandler] = {
    "torch.nn.utils.parametrizations._WeightNorm": handler(_weight_norm, METHOD,
                                                           signature("aten._weight_norm_interface")),
}

RULES: tuple[FamilyRule, ...] = ()
