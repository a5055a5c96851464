"""Module-view estimates of operators executed directly inside a module call (residual adds, F.gelu, matmul).

Each estimator receives the operator's raw ``args``, ``kwargs`` and output and returns ``(flops, macs, dmas)``,
or ``None`` when it cannot vouch for the call (an unsupported dtype, an unexpected argument layout).

FLOPs and MACs come from the same cost functions as the operator view (`.table.OPERATOR_COSTS`), so both
views price an operator alike; MACs are non-zero only for dot products (matmuls, convolutions, attention,
recurrent kernels, weighted embedding bags). DMAs are logical element accesses: every element of every tensor
argument read once, every element of the call's results written once. Exceptions, each stated below: views
and the profiler's bookkeeping markers touch nothing, allocations and random fills only write, gathers read the
selected elements rather than the whole source, ``copy_`` does not read the tensor it overwrites, and statistics
saved for the backward pass (layer-norm mean/rstd, attention logsumexp, RNN workspaces) are not results. Only
shapes and dtypes are read: tensors may live on the ``meta`` device.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...values import tensor_elements
from .calls import NO_WORK, CostFunction, argument
from .table import OPERATOR_COSTS, ZERO_WORK_OPERATORS

aten = torch.ops.aten

Estimate = tuple[float, float, float]
FunctionalEstimator = Callable[[tuple, dict, Any], "Estimate | None"]


def _reads(args: tuple, kwargs: dict) -> int:
    return tensor_elements(args) + tensor_elements(kwargs)


def _writes(out: Any, results: int | None) -> int:
    """Elements of the first ``results`` outputs (all when ``None``); the rest are saved statistics."""
    if results is not None and isinstance(out, (tuple, list)):
        return tensor_elements(out[:results])
    return tensor_elements(out)


# --- DMA rules ------------------------------------------------------------------------------------------------

DmaRule = Callable[[tuple, dict, Any], int]


def _read_and_write(results: int | None = None) -> DmaRule:
    return lambda args, kwargs, out: _reads(args, kwargs) + _writes(out, results)


def _gathered(index_position: int) -> DmaRule:
    """A gather: the indices are read, one source element per output element is read, the output is written."""
    return lambda args, kwargs, out: tensor_elements(args[index_position]) + 2 * tensor_elements(out)


def _overwrite(args: tuple, kwargs: dict, out: Any) -> int:
    """``copy_(self, src)``: the source is read, ``self`` only written."""
    return tensor_elements(args[1:]) + tensor_elements(out)


def _bag_gather(args: tuple, kwargs: dict, out: Any) -> int:
    """Embedding bags read indices, offsets, per-sample weights and one weight row per index; bags are written."""
    weight, indices = args[0], args[1]
    row = weight.shape[-1] if weight.dim() > 1 else 1
    return _reads(args[1:], kwargs) + indices.numel() * row + _writes(out, 1)


def _batch_norm_state(update_check: Callable[[tuple, dict], bool]) -> DmaRule:
    """Batch norm: inputs, parameters and running buffers read, the result written, and both running buffers
    written again when the kernel updates them in place."""
    def dmas(args: tuple, kwargs: dict, out: Any) -> int:
        updated = 2 * tensor_elements(args[3]) if update_check(args, kwargs) else 0
        return _reads(args, kwargs) + _writes(out, 1) + updated
    return dmas


def _training_with_buffers(args: tuple, kwargs: dict) -> bool:
    return bool(argument(args, kwargs, 5, "training", False)) and isinstance(args[3], torch.Tensor)


def _legit_updates(args: tuple, kwargs: dict) -> bool:
    return not isinstance(args[3], bool) and _training_with_buffers(args, kwargs)


def _functional_batch_norm(args: tuple, kwargs: dict, out: Any) -> int:
    """Outputs: the result, 2 saved statistics (+ a reserve), then the updated buffers."""
    return _reads(args, kwargs) + _writes(out, 1) + tensor_elements(out[-2:])


ZERO_WORK_DMAS: dict[str, DmaRule] = {
    "view": lambda args, kwargs, out: 0,
    "metadata": lambda args, kwargs, out: 0,
    "bookkeeping": lambda args, kwargs, out: 0,
    "allocation": lambda args, kwargs, out: tensor_elements(out),
    "random": lambda args, kwargs, out: tensor_elements(out),
    "copy": _read_and_write(),
    "selection": _read_and_write(),
}

#: Packets whose DMAs differ from "every argument read, every result written".
SPECIAL_DMAS: dict[Any, DmaRule] = {
    aten.embedding: _gathered(1),
    aten.index_select: _gathered(2),
    aten.gather: _gathered(2),
    aten.index: _gathered(1),
    aten._unsafe_index: _gathered(1),
    aten.copy_: _overwrite,
    aten.embedding_bag: _bag_gather,
    aten._embedding_bag: _bag_gather,
    aten._embedding_bag_forward_only: _bag_gather,
    aten.native_layer_norm: _read_and_write(1),
    aten.native_group_norm: _read_and_write(1),
    aten._fused_rms_norm: _read_and_write(1),
    aten._weight_norm_interface: _read_and_write(1),
    aten.log_sigmoid_forward: _read_and_write(1),
    aten.native_batch_norm: _batch_norm_state(_training_with_buffers),
    aten.cudnn_batch_norm: _batch_norm_state(_training_with_buffers),
    aten.miopen_batch_norm: _batch_norm_state(_training_with_buffers),
    aten._native_batch_norm_legit: _batch_norm_state(_legit_updates),
    aten._native_batch_norm_legit_no_training: _read_and_write(1),
    aten._batch_norm_with_update: _batch_norm_state(lambda args, kwargs: True),
    aten._batch_norm_no_update: _read_and_write(1),
    aten._scaled_dot_product_flash_attention_for_cpu: _read_and_write(1),
    aten._scaled_dot_product_flash_attention: _read_and_write(1),
    aten._scaled_dot_product_efficient_attention: _read_and_write(1),
    aten._scaled_dot_product_cudnn_attention: _read_and_write(1),
    aten.mkldnn_rnn_layer: _read_and_write(3),
    aten._thnn_fused_lstm_cell: _read_and_write(2),
    aten._thnn_fused_gru_cell: _read_and_write(1),
    aten._native_batch_norm_legit_functional: _functional_batch_norm,
    aten._batch_norm_with_update_functional: _functional_batch_norm,
    aten._scaled_dot_product_fused_attention_overrideable: _read_and_write(1),
}


# --- estimators -----------------------------------------------------------------------------------------------


def _estimator(cost: CostFunction, dmas: DmaRule) -> FunctionalEstimator:
    """``(flops, macs, dmas)`` from a cost function and a DMA rule, or ``None`` for a call it cannot vouch for."""
    def estimate(args: tuple, kwargs: dict, out: Any) -> Estimate | None:
        try:
            work = cost(args, kwargs, out)
            return None if work is None else (work.flops, work.macs, dmas(args, kwargs, out))
        except Exception:  # noqa: BLE001 -- an unexpected call layout is unestimated, never a broken forward
            return None
    return estimate


def _build() -> dict[Any, FunctionalEstimator]:
    estimators: dict[Any, FunctionalEstimator] = {}
    for packet, reason in ZERO_WORK_OPERATORS.items():
        dmas = SPECIAL_DMAS.get(packet, ZERO_WORK_DMAS[reason])
        estimators[packet] = _estimator(lambda args, kwargs, out: NO_WORK, dmas)
    for packet, cost in OPERATOR_COSTS.items():
        estimators[packet] = _estimator(cost, SPECIAL_DMAS.get(packet, _read_and_write()))
    return estimators


#: ATen operator packet -> module-view estimator of one call.
FUNCTIONAL_ESTIMATES: dict[Any, FunctionalEstimator] = _build()
