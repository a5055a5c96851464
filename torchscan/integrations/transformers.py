"""Hugging Face ``transformers`` building blocks: activations, RMSNorms, rotary embeddings, ``Conv1D`` and friends.

Classes are matched by qualified name (`HANDLERS`) or by a family rule (`RULES`) over the many per-model copies
of the same block, never by importing ``transformers``. Each handler declares the operators its formula describes,
as the library's forward runs them (see `torchscan.operator_check`); FLOPs follow the forward as written, one FLOP per
arithmetic operation or transcendental function, so they agree with the operator view of the same call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ..formulas.estimates import every_field
from ..handlers import ModuleCall, ModuleEstimates
from ..operator_check import OperatorSignature, ThirdPartyHandler
from ..results import Incomplete
from .common import (
    FLOPS_PER_ELEMENT,
    GROUP_FLOPS,
    POINTWISE,
    RMS_FLOPS,
    FamilyRule,
    as_positional,
    dense_work,
    elementwise,
    estimate_embedding,
    first_input,
    handler,
    identity,
    movement,
    movement_dmas,
    real_flops,
    signature,
)

ACTIVATION = "formula:transformers.activation"
NORM = "formula:transformers.norm"
POSITION = "formula:transformers.position"
DENSE = "formula:transformers.dense"
SHAPE = "formula:transformers.shape"

# --- activations (transformers.activations) -------------------------------------------------------------------

#: Per-element FLOPs of the forwards written out in Python: pow, tanh and erf count 1 each, like every operation.
GELU_TANH_WRITTEN_OUT = 8      # pow, multiply, add, multiply, tanh, add, multiply, multiply
FAST_GELU = 9                  # 6 multiplies, 2 additions, tanh
QUICK_GELU = 2 + FLOPS_PER_ELEMENT["sigmoid"]   # scale, sigmoid, multiply
GELU_TANH_SIGNATURE = signature("aten.pow", "aten.mul", "aten.mul", "aten.mul", "aten.mul", "aten.add", "aten.add",
                                "aten.tanh")


def _activation(variant: Callable[[Any], tuple[int, OperatorSignature]]) -> ThirdPartyHandler:
    """A handler whose per-element FLOPs and operators depend on how the module was configured."""
    def estimate(call: ModuleCall) -> ModuleEstimates:
        return elementwise(variant(call.module)[0], "input", "x")(call)
    return handler(estimate, ACTIVATION, lambda call: variant(call.module)[1])


def _fixed(per_element: int, operators: OperatorSignature) -> ThirdPartyHandler:
    return handler(elementwise(per_element, "input", "x"), ACTIVATION, operators)


def _gelu_variant(module: Any) -> tuple[int, OperatorSignature]:
    """``GELUActivation``: PyTorch's exact GELU, or ``x * 0.5 * (1 + erf(x / sqrt(2)))`` written out (5 each)."""
    if module.act is torch.nn.functional.gelu:
        return FLOPS_PER_ELEMENT["gelu"], signature("aten.gelu")
    return FLOPS_PER_ELEMENT["gelu"], signature("aten.div", "aten.erf", "aten.add", "aten.mul", "aten.mul")


def _gelu_tanh_variant(module: Any) -> tuple[int, OperatorSignature]:
    """``GELUTanh``: PyTorch's tanh GELU (x^3 as two multiplies, 9) or the Python form with ``pow`` (8)."""
    if isinstance(module.act, functools.partial):
        return FLOPS_PER_ELEMENT["gelu_tanh"], signature("aten.gelu")
    return GELU_TANH_WRITTEN_OUT, GELU_TANH_SIGNATURE


ACTIVATIONS: dict[str, ThirdPartyHandler] = {
    "GELUActivation": _activation(_gelu_variant),
    "GELUTanh": _activation(_gelu_tanh_variant),
    "PytorchGELUTanh": _activation(_gelu_tanh_variant),  # the class's name before transformers 4.56
    "NewGELUActivation": _fixed(GELU_TANH_WRITTEN_OUT, GELU_TANH_SIGNATURE),
    "AccurateGELUActivation": _fixed(GELU_TANH_WRITTEN_OUT, GELU_TANH_SIGNATURE),
    "FastGELUActivation": _fixed(FAST_GELU, signature(*["aten.mul"] * 6, "aten.add", "aten.add", "aten.tanh")),
    "QuickGELUActivation": _fixed(QUICK_GELU, signature("aten.mul", "aten.mul", "aten.sigmoid")),
    "SiLUActivation": _fixed(FLOPS_PER_ELEMENT["silu"], signature("aten.silu")),
    "MishActivation": _fixed(FLOPS_PER_ELEMENT["mish"], signature("aten.mish")),
    # clip(gelu(x)): GELU, then one comparison per bound
    "ClippedGELUActivation": _fixed(FLOPS_PER_ELEMENT["gelu"] + 2, signature("aten.gelu", "aten.clamp")),
    # 0.5 * (1 + erf((x - mu) / (sigma * sqrt(2)))): subtract, divide, erf, add, multiply
    "LaplaceActivation": _fixed(5, signature("aten.sub", "aten.div", "aten.erf", "aten.add", "aten.mul")),
    # relu(x) ** 2: one comparison, one power
    "ReLUSquaredActivation": _fixed(FLOPS_PER_ELEMENT["relu"] + 1, signature("aten.relu", "aten.pow")),
    # sqrt(softplus(x))
    "SqrtSoftplusActivation": _fixed(FLOPS_PER_ELEMENT["softplus"] + 1, signature("aten.softplus", "aten.sqrt")),
    "LinearActivation": handler(identity, ACTIVATION, signature()),
}

# --- RMS normalization ------------------------------------------------------------------------------------------


def _rms_norm(call: ModuleCall, weight_offset: bool) -> ModuleEstimates:
    """``weight * (x * rsqrt(mean(x^2) + eps))`` over the last dimension; ``(1 + weight)`` for Gemma's form.

    Per element: square, accumulate, normalize, scale (4); per group: add eps, rsqrt (2); Gemma's ``1 + weight``
    adds one addition per weight element. The parameters must be one ``weight`` vector as wide as the last
    dimension; any other configuration is outside what the formula describes (unavailable).
    """
    module, source = call.module, first_input(call, "hidden_states", "x", "input")
    parameters = dict(module.named_parameters(recurse=False))
    weight = parameters.get("weight")
    if (weight is None or list(parameters) != ["weight"] or weight.dim() != 1 or source.dim() == 0
            or source.shape[-1] != weight.numel()):
        return every_field(Incomplete(reason="the formula describes one `weight` vector as wide as the last dimension"))
    elements, width = source.numel(), weight.numel()
    flops = (RMS_FLOPS + 1) * elements + GROUP_FLOPS * (elements // width) + (width if weight_offset else 0)
    return {"module_flops": real_flops(flops, source), "macs": 0, "dmas": 2 * elements + width, **POINTWISE}


RMS_SIGNATURE = signature("aten.pow", "aten.mean", "aten.add", "aten.rsqrt", "aten.mul", "aten.mul")
RMS_NORM = handler(functools.partial(_rms_norm, weight_offset=False), NORM, RMS_SIGNATURE)
GEMMA_RMS_NORM = handler(functools.partial(_rms_norm, weight_offset=True), NORM,
                         signature("aten.pow", "aten.mean", "aten.add", "aten.add", "aten.rsqrt", "aten.mul",
                                   "aten.mul"))

# --- positions: rotary tables, learned positions, scaled word embeddings ------------------------------------------


def _rotary(call: ModuleCall) -> ModuleEstimates:
    """``cos, sin`` tables of rotary embedding from ``position_ids`` and ``inv_freq`` (d/2 frequencies).

    Per table element (N = positions x d): the outer product of positions and frequencies (N/2 multiplies,
    the table is both halves concatenated), cos and sin (N each), and both tables scaled by the attention scaling
    (N each): 4.5 N FLOPs. Reads positions and frequencies, writes both tables; pointwise along positions.
    """
    cos, sin = call.output
    positions = call.argument(1, "position_ids")
    module: Any = call.module  # a transformers class, matched by name: its attributes are not typed here
    table = cos.numel()
    return {"module_flops": table // 2 + 4 * table, "macs": 0,
            "dmas": positions.numel() + module.inv_freq.numel() + cos.numel() + sin.numel(), **POINTWISE}


ROTARY = handler(_rotary, POSITION, signature("aten.mul", "aten.mul", "aten.mul", "aten.cat", "aten.cos", "aten.sin"))


def _learned_positions(call: ModuleCall) -> ModuleEstimates:
    """Whisper's position table: rows selected by ``position_ids`` (a gather: the ids read, one row element read
    per output element, the output written), or a slice of the table (a view: nothing read or written)."""
    position_ids, output = call.argument(2, "position_ids", None), call.output
    if position_ids is None:
        module: Any = call.module  # a transformers class, matched by name: its attributes are not typed here
        return {"module_flops": 0, "macs": 0, "dmas": movement_dmas(module.weight, output), **POINTWISE}
    return {"module_flops": 0, "macs": 0, "dmas": position_ids.numel() + 2 * output.numel(), **POINTWISE}


def _learned_positions_signature(call: ModuleCall) -> OperatorSignature:
    return signature() if call.argument(2, "position_ids", None) is None else signature("aten.index")


def _scaled_word_embedding(call: ModuleCall) -> dict[str, Any]:
    """An embedding lookup multiplied by ``embed_scale``: the lookup's own formula, plus one multiply per output
    element and the scale read once (a tensor buffer, or a Python number that is no tensor element)."""
    estimates = dict(estimate_embedding(as_positional(call, "input_ids", "input")))
    scale = getattr(call.module, "embed_scale", None)
    extra_reads = scale.numel() if isinstance(scale, torch.Tensor) else 0
    if isinstance(estimates["module_flops"], int) and isinstance(estimates["dmas"], int):
        estimates["module_flops"] += call.output.numel()
        estimates["dmas"] += extra_reads
    return estimates


SCALED_WORD_EMBEDDING = handler(_scaled_word_embedding, POSITION, signature("aten.embedding", "aten.mul"))

# --- dense and shape blocks ------------------------------------------------------------------------------------


def _conv1d(call: ModuleCall) -> ModuleEstimates:
    """GPT-2's ``Conv1D``: ``addmm(bias, x, W)`` with ``W`` of shape (nx, nf), a linear layer with a transposed
    weight: nx MACs and one bias addition per output element."""
    module: Any = call.module  # a transformers class, matched by name: its attributes are not typed here
    source, output = first_input(call, "x"), call.output
    macs = output.numel() * module.weight.shape[0]
    dmas = source.numel() + module.weight.numel() + module.bias.numel() + output.numel()
    return {**dense_work(macs, output.numel(), output.dtype, dmas), **POINTWISE}


#: Qualified class name -> handler.
HANDLERS: dict[str, ThirdPartyHandler] = {
    **{f"transformers.activations.{name}": activation for name, activation in ACTIVATIONS.items()},
    "transformers.pytorch_utils.Conv1D": handler(_conv1d, DENSE, signature("aten.addmm")),
    "transformers.modeling_utils.Conv1D": handler(_conv1d, DENSE, signature("aten.addmm")),  # before 4.39
    # T5-style "LayerNorm"s are RMS norms: weight * x * rsqrt(mean(x^2) + eps)
    **{f"transformers.models.{model}.modeling_{model}.{prefix}LayerNorm": RMS_NORM
       for model, prefix in (("t5", "T5"), ("mt5", "MT5"), ("umt5", "UMT5"), ("longt5", "LongT5"))},
    # Gemma-style RMS norms scale by (1 + weight)
    **{f"transformers.models.{model}.modeling_{model}.{prefix}RMSNorm": GEMMA_RMS_NORM
       for model, prefix in (("gemma", "Gemma"), ("gemma2", "Gemma2"), ("gemma3", "Gemma3"),
                             ("vaultgemma", "VaultGemma"), ("t5gemma", "T5Gemma"))},
    "transformers.models.whisper.modeling_whisper.WhisperPositionalEmbedding": handler(
        _learned_positions, POSITION, _learned_positions_signature),
}


def _model_class(suffix: str) -> Callable[[type], bool]:
    """A class defined in a ``transformers.models.*`` module whose name ends in ``suffix``."""
    return lambda klass: klass.__module__.startswith("transformers.models.") and klass.__name__.endswith(suffix)


#: Family rules, tried in order after the qualified names (each still guarded by the operator check).
RULES: tuple[FamilyRule, ...] = (
    FamilyRule("transformers RMSNorm", "a class in `transformers.models.*` whose name ends in `RMSNorm` and whose "
               "only parameter is one `weight` vector: `weight * x * rsqrt(mean(x^2) + eps)`",
               _model_class("RMSNorm"), RMS_NORM),
    FamilyRule("transformers rotary embedding", "a class in `transformers.models.*` whose name ends in "
               "`RotaryEmbedding`: the default RoPE cos/sin tables from `position_ids` and `inv_freq`",
               _model_class("RotaryEmbedding"), ROTARY),
    FamilyRule("transformers scaled word embedding", "a class in `transformers.models.*` whose name ends in "
               "`ScaledWordEmbedding`: an embedding lookup times `embed_scale`",
               _model_class("ScaledWordEmbedding"), SCALED_WORD_EMBEDDING),
    FamilyRule("transformers same-pad layer", "a class in `transformers.models.*` whose name ends in "
               "`SamePadLayer`: drops the last time step of an even-kernel convolution (a view)",
               _model_class("SamePadLayer"), handler(movement(POINTWISE, "hidden_states"), SHAPE, signature())),
)
