"""Operator costs of normalization kernels: layer, group, RMS and batch norm.

Per group of n elements: the module view's statistics and normalization steps (`.elementwise.norm_flops_per_group`),
plus one operation per element for each affine parameter present. Batch norm uses batch statistics in training or
without running buffers (plus the running-buffer update when the kernel makes one) and the running statistics
otherwise. Real floating point only.
"""

from __future__ import annotations

from math import prod
from typing import Any

import torch

from ..conventions import GROUP_FLOPS, NORMALIZE_FLOPS, RUNNING_UPDATE_FLOPS
from .calls import CostFunction, CostTable, OpCost, affine_ops, argument, real_only
from .elementwise import norm_flops_per_group, vector_norm_flops

#: Normalization packets -> cost of one call.
COSTS = CostTable()


def _standardized(source: torch.Tensor, group_size: int, affine_per_element: int, *, centered: bool = True
                  ) -> OpCost:
    """Statistics per group of ``group_size`` elements, normalization, and ``affine_per_element`` operations."""
    total = source.numel()
    groups = total // group_size if group_size else 0
    return OpCost(groups * norm_flops_per_group(group_size, centered=centered) + total * affine_per_element)


def _layer_norm(args: tuple, kwargs: dict, out: Any) -> OpCost:
    source, shape = args[0], args[1]
    weight, bias = argument(args, kwargs, 2, "weight"), argument(args, kwargs, 3, "bias")
    return _standardized(source, prod(shape), affine_ops(weight, bias))


def _group_norm(args: tuple, kwargs: dict, out: Any) -> OpCost:
    source, weight, bias, _, channels, spatial, groups = args[:7]
    return _standardized(source, channels // groups * spatial, affine_ops(weight, bias))


def _rms_norm(args: tuple, kwargs: dict, out: Any) -> OpCost:
    source, shape, weight = args[0], args[1], argument(args, kwargs, 2, "weight")
    return _standardized(source, prod(shape), affine_ops(weight), centered=False)


def batch_norm_cost(source: torch.Tensor, weight: Any, bias: Any, running_mean: Any, batch_statistics: bool,
                    update: bool) -> OpCost:
    """Batch norm over channel dimension 1: batch statistics (training, or no running buffers) or running ones."""
    channels = source.shape[1] if source.dim() > 1 else 1
    affine = affine_ops(weight, bias) * source.numel()
    if batch_statistics or running_mean is None:
        work = _standardized(source, source.numel() // channels if channels else 0, 0)
        return OpCost(work.flops + affine + (RUNNING_UPDATE_FLOPS * channels if update else 0))
    return OpCost(source.numel() * NORMALIZE_FLOPS + channels * GROUP_FLOPS + affine)


def _batch_norm(training_index: int | None, *, update: bool | None = None) -> CostFunction:
    """A batch-norm kernel with (input, weight, bias, running_mean, running_var, ...) and ``training`` at
    ``training_index`` (``None``: the kernel's mode is fixed; ``update`` says whether it updates buffers)."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        source, weight, bias, running_mean = args[0], args[1], args[2], args[3]
        training = bool(update) if training_index is None else bool(argument(args, kwargs, training_index, "training"))
        updates = training and running_mean is not None if update is None else update
        return batch_norm_cost(source, weight, bias, running_mean, training, updates)
    return cost


_NATIVE_BATCH_NORM = _batch_norm(5)


def _legit_batch_norm(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """``_native_batch_norm_legit``: with running buffers, or ``.no_stats`` (training flag at position 3)."""
    if isinstance(args[3], bool):
        return batch_norm_cost(args[0], args[1], args[2], None, True, False)
    return _NATIVE_BATCH_NORM(args, kwargs, out)


def _batch_norm_no_update(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """Evaluation-mode batch norm: running statistics when given, else batch statistics (no update)."""
    return batch_norm_cost(args[0], args[1], args[2], args[3], args[3] is None, False)


def _weight_norm(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """``w = v * (g / ||v||)``, one 2-norm per slice of ``v`` along ``dim`` (`.vector_norm_flops`), one division
    per norm and one multiply per element of ``v``."""
    source, dim = args[0], argument(args, kwargs, 2, "dim", 0)
    groups = source.shape[dim] if source.dim() else 1
    size = source.numel() // groups if groups else 0
    return OpCost(groups * (vector_norm_flops(2, size) + 1) + source.numel())


COSTS.register(["native_layer_norm"], real_only(_layer_norm))
COSTS.register(["_weight_norm_interface"], real_only(_weight_norm))
COSTS.register(["native_group_norm"], real_only(_group_norm))
COSTS.register(["_fused_rms_norm", "rms_norm"], real_only(_rms_norm))
COSTS.register(["native_batch_norm", "_native_batch_norm_legit_functional", "cudnn_batch_norm",
                "miopen_batch_norm"], real_only(_NATIVE_BATCH_NORM))
COSTS.register(["_native_batch_norm_legit"], real_only(_legit_batch_norm))
COSTS.register(["_native_batch_norm_legit_no_training"], real_only(_batch_norm(None, update=False)))
COSTS.register(["_batch_norm_with_update", "_batch_norm_with_update_functional"],
               real_only(_batch_norm(None, update=True)))
COSTS.register(["_batch_norm_no_update"], real_only(_batch_norm_no_update))
