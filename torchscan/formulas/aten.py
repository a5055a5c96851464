"""Operator-view FLOP formulas (ATen operator packets), following PyTorch's ``FlopCounterMode`` contract.

Every built-in operator is described once, by a *cost function* in :data:`OPERATOR_COSTS`: it takes the raw
``(args, kwargs, out)`` of one dispatched call and returns an :class:`OpCost` (FLOPs and dot-product MACs), or
``None`` when the call is outside what the formula justifies (a dtype without a stated convention). Two views
are derived from that one table:

* :data:`OPERATOR_FORMULAS` (this module): raw formulas (``_get_raw = True``) for the operator recorder, called as
  ``formula(*args, **kwargs, out_val=out)``; they return the FLOP count, or ``None`` for an unjustified call (the
  recorder then reports the operator uncounted).
* ``FUNCTIONAL_ESTIMATES`` (:mod:`.functional`): the module-view estimate ``(flops, macs, dmas)``.

Entries here override ``torch.utils.flop_counter.flop_registry`` where both define one. The overrides keep
PyTorch's dot-product counts and add what TorchScan's conventions also count: bias additions of ``addmm`` and
convolutions, softmax and scaling inside fused attention kernels, and complex/integer dtype rules. Per-element
numbers come from :mod:`.elementwise_costs` (itself built on the module-view tables). Only shapes, dtypes and
non-tensor arguments are read, so every formula works on the ``meta`` device.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from math import prod
from typing import Any, NamedTuple

import torch

from .elementwise_costs import (
    ACTIVATION_FLOPS,
    ARITHMETIC_FLOPS,
    COMPLEX_ADD_REAL_FLOPS,
    COMPLEX_ARITHMETIC_FLOPS,
    COMPLEX_MAC_REAL_MACS,
    COMPLEX_REDUCTION_FLOPS,
    GROUP_FLOPS,
    NORMALIZE_FLOPS,
    REDUCTION_FLOPS,
    RUNNING_UPDATE_FLOPS,
    SOFTMAX_FLOPS,
    dtype_kind,
    interpolation_flops,
    norm_flops_per_group,
    vector_norm_flops,
)
from .recurrent import CellKind, gru_cell_kind, lstm_cell_kind, rnn_cell_kind, step_flops

aten = torch.ops.aten


class OpCost(NamedTuple):
    """The work of one operator call: FLOPs, and the MACs of its dot products (0 for everything else)."""

    flops: int
    macs: int = 0


CostFunction = Callable[[tuple, dict, Any], "OpCost | None"]
NO_WORK = OpCost(0)

#: ATen packet -> cost of one call. The single source of both the operator view and the functional estimates.
OPERATOR_COSTS: dict[Any, CostFunction] = {}
#: Packets whose cost is dominated by dot products (matmul, convolution, attention, recurrent kernels).
SIGNIFICANT_OPERATORS: set[Any] = set()


def _packets(names: Iterable[str], *, inplace: bool = False) -> Iterator[Any]:
    """The packets of ``names`` that exist in this PyTorch (and their ``name_`` in-place twins if asked)."""
    for name in names:
        for candidate in (name, name + "_") if inplace else (name,):
            packet = getattr(aten, candidate, None)
            if packet is not None:
                yield packet


def _register(names: Iterable[str], cost: CostFunction, *, inplace: bool = False, significant: bool = False
              ) -> None:
    for packet in _packets(names, inplace=inplace):
        OPERATOR_COSTS[packet] = cost
        if significant:
            SIGNIFICANT_OPERATORS.add(packet)


# --- reading a call -------------------------------------------------------------------------------------------


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    """Argument ``name`` of schema position ``index``, passed positionally or by keyword."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((item for item in value if isinstance(item, torch.Tensor)), None)
    return None


def _numel(value: Any) -> int:
    tensor = _first_tensor(value)
    return 0 if tensor is None else tensor.numel()


def operand_kind(args: tuple, kwargs: dict, out: Any) -> str | None:
    """The arithmetic of a call: ``complex`` if any operand is complex, else ``real`` if any is floating
    point, else ``integral``; ``None`` if some tensor has a dtype without a convention (quantized)."""
    kinds = set()
    for value in (*args, *kwargs.values(), out):
        if isinstance(value, torch.Tensor):
            kinds.add(_dtype_kind(value.dtype))
        elif isinstance(value, (tuple, list)):
            kinds.update(_dtype_kind(item.dtype) for item in value if isinstance(item, torch.Tensor))
        elif isinstance(value, complex):
            kinds.add("complex")
    if None in kinds:
        return None
    if "complex" in kinds:
        return "complex"
    return "real" if "real" in kinds else "integral"


_KIND_BY_DTYPE: dict[torch.dtype, str | None] = {}


def _dtype_kind(dtype: torch.dtype) -> str | None:
    """:func:`dtype_kind`, memoized: it runs for every operand of every dispatched operator."""
    try:
        return _KIND_BY_DTYPE[dtype]
    except KeyError:
        return _KIND_BY_DTYPE.setdefault(dtype, dtype_kind(dtype))


def _not_one(value: Any) -> bool:
    return value is not None and not (isinstance(value, (int, float)) and value == 1)


# --- pointwise: elementwise arithmetic, comparisons and activations ------------------------------------------


def _pointwise(real: int | Callable[[tuple, dict], int], complex_flops: int | None = None) -> CostFunction:
    """FLOPs per output element: ``real`` (a number or a function of the call's options) for real operands,
    ``complex_flops`` for complex ones (``None``: no stated count), 0 for integer and boolean arithmetic."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        kind = operand_kind(args, kwargs, out)
        if kind == "integral":
            return NO_WORK
        if kind == "real":
            per_element = real if isinstance(real, int) else real(args, kwargs)
        elif kind == "complex" and complex_flops is not None and not _scaled_by_alpha(args, kwargs):
            per_element = complex_flops
        else:
            return None
        return OpCost(per_element * _numel(out))
    return cost


def _scaled_by_alpha(args: tuple, kwargs: dict) -> bool:
    """``add``/``sub``/``rsub`` scale ``other`` by ``alpha`` (keyword, or the third argument of ``.Scalar``)."""
    return _not_one(_arg(args, kwargs, 2, "alpha", 1))


def _add_like(args: tuple, kwargs: dict) -> int:
    return ARITHMETIC_FLOPS["add"] + int(_scaled_by_alpha(args, kwargs))


def _div(args: tuple, kwargs: dict) -> int:
    return ARITHMETIC_FLOPS["div"] + int(kwargs.get("rounding_mode") is not None)


def _with_value_scale(name: str) -> Callable[[tuple, dict], int]:
    return lambda args, kwargs: ARITHMETIC_FLOPS[name] + int(_not_one(kwargs.get("value", 1)))


def _clamp(args: tuple, kwargs: dict) -> int:
    """One comparison per bound given."""
    return sum(_arg(args, kwargs, index, name) is not None for index, name in ((1, "min"), (2, "max")))


def _gelu(args: tuple, kwargs: dict) -> int:
    return ACTIVATION_FLOPS["gelu_tanh" if kwargs.get("approximate", "none") == "tanh" else "gelu"]


def _elu(args: tuple, kwargs: dict) -> int:
    """elu, plus one multiply for ``scale`` != 1 (selu) and one for ``input_scale`` != 1."""
    scale = _not_one(_arg(args, kwargs, 2, "scale", 1))
    input_scale = _not_one(_arg(args, kwargs, 3, "input_scale", 1))
    return ACTIVATION_FLOPS["elu"] + int(scale) + int(input_scale)


for _name in ("add", "sub", "rsub"):
    _register([_name], _pointwise(_add_like, COMPLEX_ARITHMETIC_FLOPS[_name]), inplace=True)
_register(["mul"], _pointwise(ARITHMETIC_FLOPS["mul"], COMPLEX_ARITHMETIC_FLOPS["mul"]), inplace=True)
_register(["neg"], _pointwise(ARITHMETIC_FLOPS["neg"], COMPLEX_ARITHMETIC_FLOPS["neg"]), inplace=True)
_register(["div"], _pointwise(_div), inplace=True)
_register(["addcmul"], _pointwise(_with_value_scale("addcmul")), inplace=True)
_register(["addcdiv"], _pointwise(_with_value_scale("addcdiv")), inplace=True)
_register(["clamp"], _pointwise(_clamp), inplace=True)
for _name in sorted(set(ARITHMETIC_FLOPS) - {"add", "sub", "rsub", "mul", "neg", "div", "addcmul", "addcdiv",
                                             "rrelu"}):
    _register([_name], _pointwise(ARITHMETIC_FLOPS[_name]), inplace=True)

#: Activation packets -> key of the activation table (or a function of the call's options).
ACTIVATION_OPERATORS: dict[str, str | Callable[[tuple, dict], int]] = {
    "relu": "relu", "hardtanh": "hardtanh", "threshold": "threshold", "leaky_relu": "leaky_relu",
    "_prelu_kernel": "prelu", "prelu": "prelu", "elu": _elu, "selu": "selu", "celu": "celu", "sigmoid": "sigmoid",
    "tanh": "tanh", "silu": "silu", "gelu": _gelu, "mish": "mish", "hardswish": "hardswish",
    "hardsigmoid": "hardsigmoid", "softplus": "softplus", "log_sigmoid_forward": "log_sigmoid", "glu": "glu",
}
for _name, _key in ACTIVATION_OPERATORS.items():
    _register([_name], _pointwise(ACTIVATION_FLOPS[_key] if isinstance(_key, str) else _key), inplace=True)
_register(["rrelu_with_noise"], _pointwise(ARITHMETIC_FLOPS["rrelu"]), inplace=True)


_MASK_AND_RESCALE = _pointwise(2)


def _masked_dropout(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """Training dropout: 1 mask multiply + 1 rescale per element (drawing the mask is not arithmetic)."""
    probability, train = _arg(args, kwargs, 1, "p", 0.0), _arg(args, kwargs, 2, "train", True)
    if train is False or probability == 0:
        return NO_WORK
    return _MASK_AND_RESCALE(args, kwargs, out)


_register(["native_dropout"], _masked_dropout)


# --- softmax and reductions -----------------------------------------------------------------------------------


def _softmax(family: str, dim_index: int = 1) -> CostFunction:
    """The activation table's per-slice softmax formula along ``dim`` (the last dimension when omitted)."""
    per_slice = SOFTMAX_FLOPS[family]

    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        if operand_kind(args, kwargs, out) != "real":
            return None
        source = args[0]
        dim = _arg(args, kwargs, dim_index, "dim")
        length = source.shape[-1 if dim is None else dim] if source.dim() else 1
        if length == 0:
            return NO_WORK
        return OpCost(source.numel() // length * per_slice(length))
    return cost


_register(["_softmax", "softmax", "_safe_softmax"], _softmax("softmax"))
_register(["_log_softmax", "log_softmax"], _softmax("log_softmax"))
_register(["_masked_softmax"], _softmax("softmax", dim_index=2))  # masking is a free selection


def _grouped(per_group: Callable[[int], int], complex_per_group: Callable[[int], int] | None = None
             ) -> Callable[[torch.Tensor, int, str], OpCost | None]:
    """Cost of reducing ``total`` elements into ``groups`` equal groups."""
    def cost(source: torch.Tensor, groups: int, kind: str) -> OpCost | None:
        if kind == "integral":
            return NO_WORK
        formula = per_group if kind == "real" else complex_per_group
        if formula is None:
            return None
        total = source.numel()
        return OpCost(groups * formula(total // groups)) if total and groups else NO_WORK
    return cost


def _reduction(key: str) -> CostFunction:
    """A reduction whose groups are the output elements (keepdim or not, one dim or many)."""
    grouped = _grouped(REDUCTION_FLOPS[key], COMPLEX_REDUCTION_FLOPS.get(key))

    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        kind = operand_kind(args, kwargs, out)
        return None if kind is None else grouped(args[0], _numel(out), kind)
    return cost


_ELEMENTWISE_EXTREMUM = _pointwise(ARITHMETIC_FLOPS["maximum"])
_EXTREMUM_REDUCTION = _reduction("extremum")


def _extremum(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """``max``/``min``: a reduction, or elementwise (``.other``) when the second argument is a tensor."""
    if len(args) > 1 and isinstance(args[1], torch.Tensor):
        return _ELEMENTWISE_EXTREMUM(args, kwargs, out)
    return _EXTREMUM_REDUCTION(args, kwargs, out)


def _vector_norm(*, fixed_order: float | None = None) -> CostFunction:
    """A p-norm over the reduced groups; the order is argument 1 (``ord`` or ``p``, 2 when omitted or None)."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        order = args[1] if len(args) > 1 else kwargs.get("ord", kwargs.get("p"))
        order = fixed_order if fixed_order is not None else 2 if order is None else order
        kind = operand_kind(args, kwargs, out)
        if kind is None:
            return None
        return _grouped(lambda n: vector_norm_flops(order, n))(args[0], _numel(out), kind)
    return cost


def _scan(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """cumsum/cumprod: n - 1 operations along each line of the scanned dimension."""
    kind = operand_kind(args, kwargs, out)
    if kind != "real":
        return NO_WORK if kind == "integral" else None
    source = args[0]
    length = source.shape[_arg(args, kwargs, 1, "dim")] if source.dim() else 1
    return OpCost(source.numel() - source.numel() // length) if length else NO_WORK


def _per_input_element(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """One comparison per input element (``nonzero`` tests, ``equal``)."""
    kind = operand_kind(args, kwargs, None)
    if kind != "real":
        return NO_WORK if kind == "integral" else None
    return OpCost(args[0].numel())


_register(["sum", "nansum"], _reduction("sum"))
_register(["mean", "nanmean"], _reduction("mean"))
_register(["prod"], _reduction("prod"))
_register(["amax", "amin", "argmax", "argmin"], _reduction("extremum"))
_register(["max", "min"], _extremum)
_register(["aminmax"], _reduction("aminmax"))
_register(["any", "all"], _reduction("any_all"))
_register(["var", "var_mean"], _reduction("var"))
_register(["std", "std_mean"], _reduction("std"))
_register(["logsumexp"], _reduction("logsumexp"))
_register(["linalg_vector_norm", "norm"], _vector_norm())
_register(["frobenius_norm"], _vector_norm(fixed_order=2))
_register(["cumsum", "cumprod"], _scan, inplace=True)
_register(["nonzero", "equal"], _per_input_element)


def _accumulate(source_index: int, source_name: str, flag_index: int | None = None) -> CostFunction:
    """index_add / scatter_add / index_put(accumulate=True): one addition per source element."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        kind = operand_kind(args, kwargs, out)
        if flag_index is not None and not _arg(args, kwargs, flag_index, "accumulate", False):
            return NO_WORK
        if kind != "real":
            return NO_WORK if kind == "integral" else None
        return OpCost(_arg(args, kwargs, source_index, source_name).numel())
    return cost


_register(["index_add"], _accumulate(3, "source"), inplace=True)
_register(["scatter_add"], _accumulate(3, "src"), inplace=True)
_register(["index_put", "_index_put_impl"], _accumulate(2, "values", flag_index=3), inplace=True)


# --- normalization --------------------------------------------------------------------------------------------


def _affine_ops(*parameters: Any) -> int:
    return sum(parameter is not None for parameter in parameters)


def _real_only(cost: CostFunction) -> CostFunction:
    def checked(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        return cost(args, kwargs, out) if operand_kind(args, kwargs, out) == "real" else None
    return checked


def _standardized(source: torch.Tensor, group_size: int, affine_ops: int, *, centered: bool = True) -> OpCost:
    """Statistics per group of ``group_size`` elements, normalization, and ``affine_ops`` per element."""
    total = source.numel()
    groups = total // group_size if group_size else 0
    return OpCost(groups * norm_flops_per_group(group_size, centered=centered) + total * affine_ops)


def _layer_norm(args: tuple, kwargs: dict, out: Any) -> OpCost:
    source, shape, weight, bias = args[0], args[1], _arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 3, "bias")
    return _standardized(source, prod(shape), _affine_ops(weight, bias))


def _group_norm(args: tuple, kwargs: dict, out: Any) -> OpCost:
    source, weight, bias, _, channels, spatial, groups = args[:7]
    return _standardized(source, channels // groups * spatial, _affine_ops(weight, bias))


def _rms_norm(args: tuple, kwargs: dict, out: Any) -> OpCost:
    source, shape, weight = args[0], args[1], _arg(args, kwargs, 2, "weight")
    return _standardized(source, prod(shape), _affine_ops(weight), centered=False)


def batch_norm_cost(source: torch.Tensor, weight: Any, bias: Any, running_mean: Any, batch_statistics: bool,
                    update: bool) -> OpCost:
    """Batch norm over channel dimension 1: batch statistics (training, or no running buffers) or running ones."""
    channels = source.shape[1] if source.dim() > 1 else 1
    affine = _affine_ops(weight, bias) * source.numel()
    if batch_statistics or running_mean is None:
        work = _standardized(source, source.numel() // channels if channels else 0, 0)
        return OpCost(work.flops + affine + (RUNNING_UPDATE_FLOPS * channels if update else 0))
    return OpCost(source.numel() * NORMALIZE_FLOPS + channels * GROUP_FLOPS + affine)


def _batch_norm(training_index: int | None, *, update: bool | None = None) -> CostFunction:
    """A batch-norm kernel with (input, weight, bias, running_mean, running_var, ...) and ``training`` at
    ``training_index`` (``None``: the kernel's mode is fixed; ``update`` says whether it updates buffers)."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        source, weight, bias, running_mean = args[0], args[1], args[2], args[3]
        if training_index is None:
            training = bool(update)
        else:
            training = bool(_arg(args, kwargs, training_index, "training"))
        updates = training and running_mean is not None if update is None else update
        return batch_norm_cost(source, weight, bias, running_mean, training, updates)
    return cost


_NATIVE_BATCH_NORM = _batch_norm(5)


def _legit_batch_norm(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """``_native_batch_norm_legit``: with running buffers, or ``.no_stats`` (training flag at position 3)."""
    if isinstance(args[3], bool):
        return batch_norm_cost(args[0], args[1], args[2], None, True, False)
    return _NATIVE_BATCH_NORM(args, kwargs, out)


def _batch_norm_no_update(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """Evaluation-mode batch norm: running statistics when given, else batch statistics (no update)."""
    return batch_norm_cost(args[0], args[1], args[2], args[3], args[3] is None, False)


_register(["native_layer_norm"], _real_only(_layer_norm))
_register(["native_group_norm"], _real_only(_group_norm))
_register(["_fused_rms_norm", "rms_norm"], _real_only(_rms_norm))
_register(["native_batch_norm", "_native_batch_norm_legit_functional", "cudnn_batch_norm", "miopen_batch_norm"],
          _real_only(_NATIVE_BATCH_NORM))
_register(["_native_batch_norm_legit"], _real_only(_legit_batch_norm))
_register(["_native_batch_norm_legit_no_training"], _real_only(_batch_norm(None, update=False)))
_register(["_batch_norm_with_update", "_batch_norm_with_update_functional"],
          _real_only(_batch_norm(None, update=True)))
_register(["_batch_norm_no_update"], _real_only(_batch_norm_no_update))


# --- pooling and interpolation --------------------------------------------------------------------------------


def _per_dim(value: Any, dims: int, default: list[int]) -> list[int]:
    """A pooling argument as one value per spatial dimension (an empty list means ``default``)."""
    if value is None or (isinstance(value, (tuple, list)) and not value):
        return default
    values = [value] if isinstance(value, int) else list(value)
    return values * dims if len(values) == 1 else values


def window_reads(length: int, outputs: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Input elements (padding excluded) read by ``outputs`` sliding windows along one dimension."""
    reads = 0
    for position in range(outputs):
        start = position * stride - padding
        first = max(0, -(start // dilation))
        last = min(kernel - 1, (length - 1 - start) // dilation)
        reads += max(0, last - first + 1)
    return reads


def _window_pool(dims: int, *, average: bool) -> CostFunction:
    """Sliding windows over the elements they read (padding excluded): a max over m elements is m - 1
    comparisons, an average m - 1 additions and 1 division (the module view's pooling rule)."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        source, pooled = args[0], _first_tensor(out)
        kernel = _per_dim(_arg(args, kwargs, 1, "kernel_size"), dims, [])
        stride = _per_dim(_arg(args, kwargs, 2, "stride"), dims, kernel)
        padding = _per_dim(_arg(args, kwargs, 3, "padding", 0), dims, [0] * dims)
        dilation = [1] * dims if average else _per_dim(_arg(args, kwargs, 4, "dilation", 1), dims, [1] * dims)
        spatial = zip(source.shape[-dims:], pooled.shape[-dims:], kernel, stride, padding, dilation)
        per_dim = [window_reads(*window) for window in spatial]
        windows = pooled.numel()
        leading = windows // prod(pooled.shape[-dims:]) if windows else 0
        reads = leading * prod(per_dim)
        return OpCost(reads if average else max(reads - windows, 0))
    return _real_only(cost)


def adaptive_window_total(input_size: int, output_size: int) -> int:
    """Sum over the outputs of their adaptive window lengths [floor(i*L/o), ceil((i+1)*L/o))."""
    return sum(-(-(i + 1) * input_size // output_size) - i * input_size // output_size for i in range(output_size))


def _adaptive_pool(*, average: bool) -> CostFunction:
    """Adaptive windows, summed exactly per dimension (they are separable)."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        source, output_size = args[0], list(_arg(args, kwargs, 1, "output_size"))
        spatial = list(source.shape[-len(output_size):])
        leading = source.numel() // prod(spatial) if prod(spatial) else 0
        window_elements = leading * prod(adaptive_window_total(size, target)
                                         for size, target in zip(spatial, output_size))
        return OpCost(window_elements if average else window_elements - _numel(out))
    return _real_only(cost)


def _interpolate(taps: int) -> CostFunction:
    return _real_only(lambda args, kwargs, out: OpCost(_numel(out) * interpolation_flops(taps)))


for _dims in (1, 2, 3):
    _register([f"max_pool{_dims}d", f"max_pool{_dims}d_with_indices", f"mkldnn_max_pool{_dims}d"],
              _window_pool(_dims, average=False))
    _register([f"avg_pool{_dims}d", f"mkldnn_avg_pool{_dims}d"], _window_pool(_dims, average=True))
    _register([f"adaptive_avg_pool{_dims}d", f"_adaptive_avg_pool{_dims}d", f"mkldnn_adaptive_avg_pool{_dims}d"],
              _adaptive_pool(average=True))
    _register([f"adaptive_max_pool{_dims}d"], _adaptive_pool(average=False))
_register(["upsample_linear1d"], _interpolate(2))
_register(["upsample_bilinear2d"], _interpolate(4))
_register(["upsample_trilinear3d"], _interpolate(8))
_register(["upsample_bicubic2d"], _interpolate(16))


def _embedding_bag(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """Per gathered element: 1 accumulation (sum, mean) or comparison (max); a per-sample weight makes it 1 MAC;
    mean adds 1 division per output element. With a ``padding_idx`` the skipped lookups depend on index values,
    which formulas never read: ``None``."""
    weight, indices = args[0], args[1]
    mode = _arg(args, kwargs, 4, "mode", 0)
    weighted = _arg(args, kwargs, 6, "per_sample_weights") is not None
    padding_idx = _arg(args, kwargs, 8, "padding_idx")
    if padding_idx is not None and padding_idx >= 0:
        return None
    gathered = indices.numel() * (weight.shape[-1] if weight.dim() > 1 else 1)
    divisions = _numel(out) if mode == 1 else 0
    return OpCost(gathered * (1 + weighted) + divisions, gathered if weighted else 0)


_register(["embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"], _real_only(_embedding_bag))


# --- dot products: matmul family and convolutions -------------------------------------------------------------


def dense_cost(macs: int, additions: int, kind: str | None) -> OpCost | None:
    """Real: 2 FLOPs per MAC, 1 per addition. Complex: one complex MAC is 4 real MACs (8 FLOPs), a complex addition
    2 FLOPs. Integer dot products have no FLOPs and their MACs are outside the operator view: ``None``."""
    if kind == "real":
        return OpCost(2 * macs + additions, macs)
    if kind == "complex":
        real_macs = COMPLEX_MAC_REAL_MACS * macs
        return OpCost(2 * real_macs + COMPLEX_ADD_REAL_FLOPS * additions, real_macs)
    return None


def _product(contracted: Callable[[tuple, dict], int], *, self_added: bool) -> CostFunction:
    """MACs = output elements x contracted length; ``self_added``: beta * self + alpha * product (addmm style):
    1 addition per output element unless beta = 0, 1 multiply each for beta and alpha other than 1."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        elements = _numel(out)
        additions = 0
        kind = operand_kind(args, kwargs, out)
        if self_added:
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            if kind == "complex" and (_not_one(beta) or _not_one(alpha)):
                return None
            additions = elements * ((beta != 0) + (beta not in (0, 1)) + _not_one(alpha))
        return dense_cost(elements * contracted(args, kwargs), additions, kind)
    return cost


def _last_dim(index: int) -> Callable[[tuple, dict], int]:
    return lambda args, kwargs: args[index].shape[-1]


def _batched_sum(args: tuple, kwargs: dict) -> int:
    """addbmm sums the b products: each output element contracts b * k terms."""
    return args[1].shape[0] * args[1].shape[-1]


def _dot(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    return dense_cost(args[0].numel(), 0, operand_kind(args, kwargs, out))


def _addmm_activation(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """addmm followed by relu, or by the tanh-approximated gelu (``use_gelu=True``)."""
    product = _product(_last_dim(1), self_added=True)(args, kwargs, out)
    if product is None or operand_kind(args, kwargs, out) != "real":
        return None
    activation = ACTIVATION_FLOPS["gelu_tanh" if kwargs.get("use_gelu", False) else "relu"]
    return OpCost(product.flops + activation * _numel(out), product.macs)


def _linear(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    bias = _arg(args, kwargs, 2, "bias")
    return dense_cost(_numel(out) * args[1].shape[-1], _numel(out) if bias is not None else 0,
                      operand_kind(args, kwargs, out))


_register(["mm", "bmm"], _product(_last_dim(0), self_added=False), significant=True)
_register(["addmm", "baddbmm"], _product(_last_dim(1), self_added=True), inplace=True, significant=True)
_register(["addmv"], _product(_last_dim(1), self_added=True), inplace=True, significant=True)
_register(["mv"], _product(_last_dim(0), self_added=False), significant=True)
_register(["addbmm"], _product(_batched_sum, self_added=True), inplace=True, significant=True)
_register(["dot", "vdot"], _dot, significant=True)
_register(["_addmm_activation"], _addmm_activation, significant=True)
_register(["linear", "mkldnn_linear"], _linear, significant=True)


def convolution_macs(source: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, transposed: bool) -> int:
    """Every output element takes C_in/groups * prod(k) MACs; transposed, every input element gives
    C_out/groups * prod(k) (``weight.numel() / weight.shape[0]`` in both layouts)."""
    per_element = weight.numel() // weight.shape[0] if weight.shape[0] else 0
    return (source.numel() if transposed else out.numel()) * per_element


def _convolution(bias_index: int | None, transposed_index: int | None = None, *, transposed: bool = False
                 ) -> CostFunction:
    """A convolution kernel: input and weight first, bias and ``transposed`` at the given schema positions."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        is_transposed = transposed if transposed_index is None else bool(_arg(args, kwargs, transposed_index,
                                                                               "transposed", False))
        bias = None if bias_index is None else _arg(args, kwargs, bias_index, "bias")
        result = _first_tensor(out)
        macs = convolution_macs(args[0], args[1], result, is_transposed)
        return dense_cost(macs, result.numel() if bias is not None else 0, operand_kind(args, kwargs, out))
    return cost


_register(["convolution", "_convolution", "convolution_overrideable"], _convolution(2, 6), significant=True)
_register(["mkldnn_convolution", "_convolution_mode", "_nnpack_spatial_convolution", "conv1d", "conv2d",
           "conv3d"], _convolution(2), significant=True)
_register(["conv_transpose1d", "conv_transpose2d", "conv_transpose3d"], _convolution(2, transposed=True),
          significant=True)
_register(["_slow_conv2d_forward", "slow_conv3d_forward", "slow_conv_dilated2d", "slow_conv_dilated3d",
           "_conv_depthwise2d", "thnn_conv2d"], _convolution(3), significant=True)
_register(["slow_conv_transpose2d", "slow_conv_transpose3d"], _convolution(3, transposed=True), significant=True)
_register(["cudnn_convolution"], _convolution(None), significant=True)
_register(["cudnn_convolution_transpose"], _convolution(None, transposed=True), significant=True)


# --- attention ------------------------------------------------------------------------------------------------


def attention_cost(batch_heads: int, query_length: int, key_length: int, head_dim: int, value_dim: int, *,
                   additive_mask: bool = False, dropout: bool = False) -> OpCost:
    """Scaled dot-product attention over the full score matrix (a causal or boolean mask is a free selection).

    MACs: QK^T and weights . V. FLOPs: 2 per MAC, the scaling once per query element (q * scale, as the
    module view counts it), 1 addition per score for a floating-point mask, softmax over each query row, and
    2 per score for training dropout (mask multiply, rescale).
    """
    scores = batch_heads * query_length * key_length
    macs = scores * (head_dim + value_dim)
    scaling = batch_heads * query_length * head_dim
    softmax = batch_heads * query_length * SOFTMAX_FLOPS["softmax"](key_length) if key_length else 0
    return OpCost(2 * macs + scaling + scores * (additive_mask + 2 * dropout) + softmax, macs)


def _is_additive(mask: Any) -> bool:
    """A floating-point mask is added to the scores; a boolean one selects (free); none adds nothing."""
    return isinstance(mask, torch.Tensor) and mask.dtype != torch.bool


def _attention_mask(args: tuple, kwargs: dict, index: int | None) -> Any:
    """The additive or boolean mask, named ``attn_mask`` or ``attn_bias`` depending on the kernel."""
    if index is not None and len(args) > index:
        return args[index]
    mask = kwargs.get("attn_mask")
    return kwargs.get("attn_bias") if mask is None else mask


def _sdpa(mask_index: int | None, dropout_index: int) -> CostFunction:
    """A fused SDPA kernel on (..., heads, length, dim) tensors; grouped key/value heads are broadcast."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        query, key, value = args[0], args[1], args[2]
        if operand_kind(args[:3], {}, None) != "real" or any(t.is_nested for t in (query, key, value)):
            return None
        mask = _attention_mask(args, kwargs, mask_index)
        dropout = _arg(args, kwargs, dropout_index, "dropout_p", 0.0)
        return attention_cost(prod(query.shape[:-2]), query.shape[-2], key.shape[-2], query.shape[-1],
                              value.shape[-1], additive_mask=_is_additive(mask), dropout=bool(dropout))
    return cost


_register(["_scaled_dot_product_flash_attention_for_cpu"], _sdpa(None, 3), significant=True)
_register(["_scaled_dot_product_attention_math", "_scaled_dot_product_attention_math_for_mps"], _sdpa(3, 4),
          significant=True)
_register(["_scaled_dot_product_flash_attention"], _sdpa(None, 3), significant=True)
_register(["_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"], _sdpa(3, 5),
          significant=True)
_register(["_scaled_dot_product_fused_attention_overrideable"], _sdpa(3, 4), significant=True)


def sequence_lengths(tokens: torch.Tensor) -> list[int]:
    """Per-sequence lengths of a (batch, length, features) tensor, (length, features), or a nested tensor
    (whose sizes are metadata held on the CPU)."""
    if tokens.is_nested:
        return [int(size[0]) for size in tokens._nested_tensor_size().tolist()]
    if tokens.dim() == 2:
        return [tokens.shape[0]]
    return [tokens.shape[1]] * tokens.shape[0]


def self_attention_cost(lengths: list[int], heads: int, embed_dim: int) -> OpCost:
    """Scores, softmax and weighted sum of multi-head self-attention over sequences of ``lengths``."""
    head_dim = embed_dim // heads
    costs = [attention_cost(heads, length, length, head_dim, head_dim) for length in lengths]
    return OpCost(sum(c.flops for c in costs), sum(c.macs for c in costs))


def _projection(tokens: int, in_features: int, out_features: int, bias: bool) -> OpCost:
    """A linear layer applied to ``tokens`` rows."""
    macs = tokens * in_features * out_features
    return OpCost(2 * macs + (tokens * out_features if bias else 0), macs)


def _weight_projection(tokens: int, weight: torch.Tensor, bias: Any) -> OpCost:
    return _projection(tokens, weight.shape[-1], weight.shape[0], bias is not None)


def _total(*costs: OpCost) -> OpCost:
    return OpCost(sum(c.flops for c in costs), sum(c.macs for c in costs))


def _native_multi_head_attention(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """nn.MultiheadAttention's fused path: q, k, v projections, attention, output projection, and the average
    over heads of the returned weights (H per weight element) when ``need_weights`` and averaging.

    The kernel turns any mask into a boolean one and applies it in a masked softmax: a free selection.
    """
    query, key = args[0], args[1]
    embed_dim, heads, _, qkv_bias, proj_weight, proj_bias = args[3:9]
    if operand_kind(args[:3], {}, None) != "real" or query.is_nested or key.is_nested:
        return None
    need_weights = _arg(args, kwargs, 10, "need_weights", True)
    average = _arg(args, kwargs, 11, "average_attn_weights", True)
    query_tokens, key_tokens = query.numel() // embed_dim, key.numel() // embed_dim
    batch = query.shape[0] if query.dim() == 3 else 1
    # q from the query tokens, k and v from the key tokens (one packed GEMM when they are the same tensor)
    in_projection = _projection(query_tokens + 2 * key_tokens, embed_dim, embed_dim, qkv_bias is not None)
    head_dim = embed_dim // heads
    attention = attention_cost(batch * heads, query_tokens // batch, key_tokens // batch, head_dim, head_dim)
    scores = batch * heads * (query_tokens // batch) * (key_tokens // batch)
    averaging = OpCost(scores if need_weights and average else 0)
    return _total(in_projection, attention, _weight_projection(query_tokens, proj_weight, proj_bias), averaging)


def _transformer_encoder_layer(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """nn.TransformerEncoderLayer's fused path, from the weights' shapes: self-attention block (masks are free
    selections, as in ``_native_multi_head_attention``), two residual additions, two layer norms, and the
    feed-forward block (relu, or exact gelu when ``use_gelu``)."""
    src, embed_dim, heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu = args[:8]
    norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2 = args[10:14]
    ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2 = args[14:18]
    if operand_kind((src, qkv_weight), {}, None) != "real":
        return None
    lengths = sequence_lengths(src)
    tokens = sum(lengths)
    per_token_norm = norm_flops_per_group(embed_dim, centered=True)
    layer_norms = tokens * (2 * per_token_norm + embed_dim * _affine_ops(norm_weight_1, norm_bias_1,
                                                                          norm_weight_2, norm_bias_2))
    activation = ACTIVATION_FLOPS["gelu" if use_gelu else "relu"] * tokens * ffn_weight_1.shape[0]
    return _total(
        _weight_projection(tokens, qkv_weight, qkv_bias),
        self_attention_cost(lengths, heads, embed_dim),
        _weight_projection(tokens, proj_weight, proj_bias),
        _weight_projection(tokens, ffn_weight_1, ffn_bias_1),
        _weight_projection(tokens, ffn_weight_2, ffn_bias_2),
        OpCost(2 * tokens * embed_dim + layer_norms + activation),  # two residual additions
    )


_register(["_native_multi_head_attention"], _native_multi_head_attention, significant=True)
_register(["_transformer_encoder_layer_fwd"], _transformer_encoder_layer, significant=True)


# --- recurrent kernels ----------------------------------------------------------------------------------------

#: cuDNN-style mode numbers used by ``mkldnn_rnn_layer``.
RNN_MODES: dict[int, Callable[[], CellKind]] = {
    0: lambda: rnn_cell_kind("relu"),
    1: lambda: rnn_cell_kind("tanh"),
    2: lstm_cell_kind,
    3: gru_cell_kind,
}


def _mkldnn_rnn_layer(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """One layer and direction over every (step, sample) row: the module view's per-step recurrent formula."""
    source, weight_ih, weight_hh = args[0], args[1], args[2]
    mode, hidden_size, has_biases = args[9], args[10], args[12]
    if operand_kind(args[:3], {}, None) != "real" or mode not in RNN_MODES:
        return None
    rows = source.numel() // source.shape[-1] if source.shape[-1] else 0
    row_macs = weight_ih.numel() + weight_hh.numel()
    return OpCost(rows * step_flops(RNN_MODES[mode](), hidden_size, row_macs, has_biases), rows * row_macs)


def _fused_cell(kind: Callable[[], CellKind]) -> CostFunction:
    """The pointwise half of a cell whose gate matmuls ran separately: gate sums, biases, nonlinearities."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        state = args[2]
        if operand_kind(args[:3], {}, None) != "real":
            return None
        cell = kind()
        biases = _affine_ops(_arg(args, kwargs, 3, "input_bias"), _arg(args, kwargs, 4, "hidden_bias"))
        return OpCost(state.numel() * (cell.pointwise_flops + cell.gates * biases))
    return cost


_register(["mkldnn_rnn_layer"], _mkldnn_rnn_layer, significant=True)
_register(["_thnn_fused_lstm_cell"], _fused_cell(lstm_cell_kind), significant=True)
_register(["_thnn_fused_gru_cell"], _fused_cell(gru_cell_kind), significant=True)


# --- operators that do no floating-point work -----------------------------------------------------------------

#: Operators that do no floating-point work, with the reason: listed as ignored, never counted.
ZERO_WORK_OPERATORS: dict[Any, str] = {}
ZERO_WORK_NAMES: dict[str, list[str]] = {
    "view": ["view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "expand_as", "squeeze",
             "unsqueeze", "select", "slice", "alias", "as_strided", "unbind", "split", "split_with_sizes", "chunk",
             "unsafe_split", "unsafe_split_with_sizes", "unsafe_chunk", "narrow", "unfold", "view_as",
             "view_as_real", "view_as_complex", "flatten", "unflatten", "diagonal", "detach", "lift_fresh",
             "_reshape_alias", "numpy_T", "movedim", "moveaxis", "swapaxes", "swapdims", "_conj", "conj",
             "resolve_conj", "resolve_neg", "_neg_view", "real", "imag", "positive", "t_", "transpose_",
             "squeeze_", "unsqueeze_", "as_strided_", "detach_", "_nested_view_from_buffer"],
    "copy": ["clone", "copy_", "_to_copy", "contiguous", "cat", "stack", "hstack", "vstack", "_unsafe_index",
             "index_select", "gather", "repeat", "repeat_interleave", "flip", "roll", "rot90", "constant_pad_nd",
             "reflection_pad1d", "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d",
             "replication_pad3d", "index", "lift_fresh_copy", "masked_select", "tril", "triu", "embedding",
             "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "_pin_memory", "to", "index_copy",
             "index_copy_", "scatter", "scatter_", "masked_scatter", "masked_scatter_", "slice_scatter",
             "select_scatter", "diagonal_scatter", "as_strided_scatter", "im2col", "upsample_nearest1d",
             "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
             "_upsample_nearest_exact3d", "_nested_tensor_from_mask", "_nested_tensor_from_tensor_list",
             "to_padded_tensor", "_local_scalar_dense", "view_copy", "permute_copy", "expand_copy",
             "transpose_copy", "t_copy", "unsqueeze_copy", "squeeze_copy", "alias_copy", "slice_copy",
             "select_copy", "detach_copy", "split_copy", "split_with_sizes_copy", "unbind_copy", "_unsafe_view_copy"],
    "selection": ["where", "masked_fill", "masked_fill_"],
    "allocation": ["empty", "empty_like", "empty_strided", "empty_permuted", "zeros", "zeros_like", "ones",
                   "ones_like", "full", "full_like", "fill_", "zero_", "new_empty", "new_zeros", "new_ones",
                   "new_full", "arange", "scalar_tensor", "new_empty_strided", "fill", "eye", "linspace",
                   "logspace", "resize_", "resize_as_", "set_"],
    "random": ["bernoulli", "bernoulli_", "uniform", "uniform_", "normal", "normal_", "rand", "randn",
               "randint", "rand_like", "randn_like", "randint_like", "randperm", "exponential_", "geometric_",
               "cauchy_", "log_normal_", "random_", "multinomial"],
    "metadata": ["sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
                 "_has_compatible_shallow_copy_type", "_nested_tensor_from_mask_left_aligned",
                 "_nested_tensor_size", "_nested_tensor_strides", "_nested_tensor_storage_offsets",
                 "_assert_async", "_assert_scalar", "_functional_assert_async", "_assert_tensor_metadata",
                 "record_stream", "is_nonzero", "_version", "is_coalesced", "dense_dim", "sparse_dim"],
}
for _reason, _names in ZERO_WORK_NAMES.items():
    for _packet in _packets(_names):
        ZERO_WORK_OPERATORS[_packet] = _reason


# --- the operator view ----------------------------------------------------------------------------------------


def operator_formula(cost: CostFunction) -> Callable[..., Any]:
    """A raw PyTorch-style FLOP formula (``_get_raw = True``) returning ``cost``'s FLOPs, ``None`` if unjustified."""
    def formula(*args: Any, out_val: Any = None, **kwargs: Any) -> int | None:
        estimate = cost(args, kwargs, out_val)
        return None if estimate is None else estimate.flops
    formula._get_raw = True  # type: ignore[attr-defined]
    return formula


#: Built-in operator formulas, the operator view of :data:`OPERATOR_COSTS`; they override PyTorch's registry.
OPERATOR_FORMULAS: dict[Any, Callable[..., Any]] = {packet: operator_formula(cost)
                                                    for packet, cost in OPERATOR_COSTS.items()}

#: Name parts that mark an unknown operator as a dense product (``_weight_int8pack_mm``, ``my_attention``).
DENSE_NAME_PARTS = frozenset({"matmul", "linear", "conv", "convolution", "attention", "attn", "rnn", "lstm", "gru",
                              "einsum", "dot", "mv", "addmv", "transformer", "gemm", "gemv", "sdpa", "mha"})


def operator_significance(packet: Any) -> str:
    """``significant`` for dot-product kernels (matmul, convolution, attention, recurrent), else ``minor``.

    Built-in packets are classified by their family; an unknown packet by its name (``upsample_linear1d`` is an
    interpolation, not a dense product).
    """
    if packet in SIGNIFICANT_OPERATORS:
        return "significant"
    if packet in OPERATOR_COSTS or packet in ZERO_WORK_OPERATORS:
        return "minor"
    name = str(getattr(packet, "_qualified_op_name", packet)).split("::")[-1].split(".")[-1].lower()
    parts = [part for part in re.split(r"[_\d]+", name) if part]
    dense = any(part.endswith("mm") or part in DENSE_NAME_PARTS for part in parts)
    return "significant" if dense and "upsample" not in parts else "minor"
