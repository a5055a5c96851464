"""Operators that do no floating-point work: views, copies, selections, allocations, random fills, metadata, and
the profiler's bookkeeping.

The operator view lists them as ignored, with the reason, and never counts them. The backward kernels of views
(``slice_backward``, ``select_backward``, ...) scatter the gradient into zeros of the input's shape: an allocation
and a copy, listed as copies. A view's gradient that needs a sum (``expand``, broadcasting) dispatches ``sum``,
counted there.
"""

from __future__ import annotations

from typing import Any

import torch

from .calls import packets

#: Reason -> names of the operators that do no floating-point work for that reason.
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
             "select_copy", "detach_copy", "split_copy", "split_with_sizes_copy", "unbind_copy",
             # backward kernels of views and copies: the gradient written into zeros of the input's shape
             "slice_backward", "select_backward", "diagonal_backward",
             "_foreach_copy", "_foreach_copy_", "_foreach_clone"],
    "selection": ["where", "masked_fill", "masked_fill_"],
    "allocation": ["empty", "empty_like", "empty_strided", "empty_permuted", "zeros", "zeros_like", "ones",
                   "ones_like", "full", "full_like", "fill_", "zero_", "new_empty", "new_zeros", "new_ones",
                   "new_full", "arange", "scalar_tensor", "new_empty_strided", "fill", "eye", "linspace",
                   "logspace", "resize_", "resize_as_", "set_", "_foreach_zero", "_foreach_zero_"],
    "random": ["bernoulli", "bernoulli_", "uniform", "uniform_", "normal", "normal_", "rand", "randn",
               "randint", "rand_like", "randn_like", "randint_like", "randperm", "exponential_", "geometric_",
               "cauchy_", "log_normal_", "random_", "multinomial"],
    "metadata": ["sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size",
                 "_has_compatible_shallow_copy_type", "_nested_tensor_from_mask_left_aligned",
                 "_nested_tensor_size", "_nested_tensor_strides", "_nested_tensor_storage_offsets",
                 "_assert_async", "_assert_scalar", "_functional_assert_async", "_assert_tensor_metadata",
                 "record_stream", "is_nonzero", "_version", "is_coalesced", "dense_dim", "sparse_dim"],
}


#: The profiler's markers that ``torch.optim`` and ``record_function`` dispatch around a step: bookkeeping of
#: the profiler, not arithmetic (``torch.ops.profiler``, not ATen).
BOOKKEEPING_OPERATORS: dict[Any, str] = {torch.ops.profiler._record_function_enter_new: "bookkeeping",
                                         torch.ops.profiler._record_function_exit: "bookkeeping"}


def _by_packet(names_by_reason: dict[str, list[str]]) -> dict[Any, str]:
    """Packet -> reason; every name must be an operator of the installed PyTorch, listed once."""
    reasons: dict[Any, str] = dict(BOOKKEEPING_OPERATORS)
    for reason, names in names_by_reason.items():
        for packet in packets(names):
            if packet in reasons:
                raise ValueError(f"{packet} is listed twice as zero-work")
            reasons[packet] = reason
    return reasons


#: Operators that do no floating-point work, with the reason: listed as ignored, never counted.
ZERO_WORK_OPERATORS: dict[Any, str] = _by_packet(ZERO_WORK_NAMES)
