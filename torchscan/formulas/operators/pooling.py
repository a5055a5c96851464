"""Operator costs of window and bag reductions: pooling, interpolation and embedding bags.

Pooling follows the module view's rule, on the window geometry both views share (:mod:`..conventions`): a window
of m read elements (padding excluded) costs m - 1 comparisons (max) or m - 1 additions and 1 division (average).
Interpolation costs the module view's per-output count for its taps; nearest modes are copies (see
:mod:`.zero_work`). Real floating point only.
"""

from __future__ import annotations

from typing import Any

from ..conventions import adaptive_pool_reads, window_pool_reads
from .calls import CostFunction, CostTable, OpCost, argument, numel, output_tensor, real_only
from .elementwise import interpolation_flops

#: Pooling, interpolation and embedding-bag packets -> cost of one call.
COSTS = CostTable()


# --- pooling --------------------------------------------------------------------------------------------------


def _window_pool(dims: int, *, average: bool) -> CostFunction:
    """Sliding windows, priced by the pooling rule above."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        source, pooled = args[0], output_tensor(out)
        dilation = 1 if average else argument(args, kwargs, 4, "dilation", 1)
        reads = window_pool_reads(source, pooled, dims, argument(args, kwargs, 1, "kernel_size"),
                                  argument(args, kwargs, 2, "stride"), argument(args, kwargs, 3, "padding", 0),
                                  dilation)
        return OpCost(reads if average else max(reads - pooled.numel(), 0))
    return real_only(cost)


def _adaptive_pool(*, average: bool) -> CostFunction:
    """Adaptive windows: m elements read per window, m - 1 comparisons (max) or m operations (average)."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        reads = adaptive_pool_reads(args[0], list(argument(args, kwargs, 1, "output_size")))
        return OpCost(reads if average else reads - numel(out))
    return real_only(cost)


for _dims in (1, 2, 3):
    COSTS.register([f"max_pool{_dims}d", f"max_pool{_dims}d_with_indices"], _window_pool(_dims, average=False))
    COSTS.register([f"avg_pool{_dims}d"], _window_pool(_dims, average=True))
    COSTS.register([f"adaptive_avg_pool{_dims}d"], _adaptive_pool(average=True))
    COSTS.register([f"adaptive_max_pool{_dims}d"], _adaptive_pool(average=False))
# The kernels PyTorch dispatches to for some dimensions only (oneDNN, and the 2-D/3-D adaptive average kernels).
COSTS.register(["mkldnn_max_pool2d"], _window_pool(2, average=False))
COSTS.register(["mkldnn_max_pool3d"], _window_pool(3, average=False))
COSTS.register(["_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "mkldnn_adaptive_avg_pool2d"],
               _adaptive_pool(average=True))


# --- interpolation --------------------------------------------------------------------------------------------


def _interpolate(taps: int) -> CostFunction:
    return real_only(lambda args, kwargs, out: OpCost(numel(out) * interpolation_flops(taps)))


COSTS.register(["upsample_linear1d"], _interpolate(2))
COSTS.register(["upsample_bilinear2d"], _interpolate(4))
COSTS.register(["upsample_trilinear3d"], _interpolate(8))
COSTS.register(["upsample_bicubic2d"], _interpolate(16))


# --- embedding bags -------------------------------------------------------------------------------------------


def _embedding_bag(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """Per gathered element: 1 accumulation (sum, mean) or comparison (max); a per-sample weight makes it 1 MAC;
    mean adds 1 division per output element. With a ``padding_idx`` the skipped lookups depend on index values,
    which formulas never read: ``None``."""
    weight, indices = args[0], args[1]
    mode = argument(args, kwargs, 4, "mode", 0)
    weighted = argument(args, kwargs, 6, "per_sample_weights") is not None
    padding_idx = argument(args, kwargs, 8, "padding_idx")
    if padding_idx is not None and padding_idx >= 0:
        return None
    gathered = indices.numel() * (weight.shape[-1] if weight.dim() > 1 else 1)
    divisions = numel(out) if mode == 1 else 0
    return OpCost(gathered * (1 + weighted) + divisions, gathered if weighted else 0)


COSTS.register(["embedding_bag", "_embedding_bag", "_embedding_bag_forward_only"], real_only(_embedding_bag))
