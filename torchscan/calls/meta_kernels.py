"""On ``meta``, the attention kernel an accelerator would run instead of meta's math path.

People analyze a model on ``meta`` to size a run on an accelerator, but meta runs meta kernels: PyTorch's
``scaled_dot_product_attention`` there takes the math path (``_fused_sdp_choice`` answers math for meta), which
materializes the (batch, heads, queries, keys) score matrices that a GPU's fused kernels never allocate. By default
(``meta_kernels="accelerator"``) an analysis on meta therefore routes each ``scaled_dot_product_attention`` call on
meta tensors to the fused kernel CUDA would pick for those inputs, by calling that aten operator directly: autograd
(its backward is the fused kernel's backward), the operator recorder, the FLOP formulas and the memory trace all see
the fused operator, as they would on the GPU. ``meta_kernels="math"`` keeps meta's own kernels.

The choice mirrors PyTorch's CUDA dispatch (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp,
``select_sdp_backend``: flash, then memory-efficient, then math; the constraints in ``can_use_flash_attention`` and
``can_use_mem_efficient_attention`` with the helpers of ``sdp_utils_cpp.h``) for an sm80-or-newer GPU (A100, H100),
and the call's preparation mirrors ``scaled_dot_product_attention`` in aten/src/ATen/native/transformers/
attention.cpp (the flash kernel's head dimension padded to a multiple of 8, a boolean mask made additive and its
rows aligned for the memory-efficient kernel). Where PyTorch prefers cuDNN's attention (a Hopper or Blackwell GPU
with cuDNN newer than 9.15), the kernel is cuDNN's, which also never allocates the score matrix.

The routing is a `torch.overrides.TorchFunctionMode` entered for the analysis only (`meta_attention`): nothing is
registered globally and nothing is left behind, also when the analysis raises. Calls on other devices, and calls
CUDA would send to the math path, run unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional
from torch.overrides import TorchFunctionMode

from ..values import tensors_in

#: The values of ``meta_kernels``: the accelerator's attention kernel on meta (the default), or meta's own math path.
ACCELERATOR, MATH = "accelerator", "math"
META_KERNELS = (ACCELERATOR, MATH)
_SDPA = functional.scaled_dot_product_attention
_aten = torch.ops.aten
_SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_HALF = (torch.float16, torch.bfloat16)
#: Flash attention's largest head dimension (``check_head_dim_size_flash``).
FLASH_MAX_HEAD_DIM = 256
#: The flash kernel's head dimension is padded to a multiple of this (``pad_last_dim<8>`` in attention.cpp).
FLASH_HEAD_DIM_ALIGNMENT = 8
#: The memory-efficient kernel's mask rows are aligned to this many elements (``preprocess_mask``).
MASK_ALIGNMENT = 8


def check_meta_kernels(value: Any) -> str:
    """``meta_kernels`` checked: ``"accelerator"`` or ``"math"`` (else a ``ValueError`` naming the argument)."""
    if not isinstance(value, str) or value not in META_KERNELS:
        raise ValueError(f"meta_kernels must be one of {', '.join(map(repr, META_KERNELS))} (on meta, the attention "
                         f"kernel an accelerator would run, or meta's own math path), got {value!r}")
    return value


def runs_on_meta(model: torch.nn.Module, args: Any, kwargs: Any) -> bool:
    """Whether the analysis runs on ``meta``: a parameter, buffer or tensor of the call is a meta tensor."""
    if any(tensor.is_meta for tensor in (*tensors_in(args), *tensors_in(kwargs))):
        return True
    # every module's own tensors through a stack: a tenth of the cost of parameters() and buffers(), whose nested
    # generators and shared-tensor bookkeeping run for every analysis
    pending: list[torch.nn.Module | None] = [model]
    while pending:
        module = pending.pop()
        if module is None:  # a child registered as None
            continue
        for tensors in (module._parameters, module._buffers):
            for tensor in tensors.values():
                if tensor is not None and tensor.is_meta:
                    return True
        pending.extend(module._modules.values())
    return False


@contextmanager
def meta_attention(choice: str | None) -> Iterator[ReplayedCalls | None]:
    """The block with ``choice``'s attention kernels on meta: with ``"accelerator"``, `AcceleratorAttention` is
    in force, and the block gets the `ReplayedCalls` that keeps it in force for calls re-run in a backward (the
    analysis's tracer subscribes it); both are gone afterwards, also after an error. With ``"math"`` or ``None``,
    nothing changes (the block gets None)."""
    if choice != ACCELERATOR:
        yield None
        return
    replayed = ReplayedCalls()
    try:
        with AcceleratorAttention():
            yield replayed
    finally:
        replayed.close()


class AcceleratorAttention(TorchFunctionMode):
    """Sends ``scaled_dot_product_attention`` on meta tensors to the fused kernel CUDA would pick; every other call,
    and every call CUDA would send to the math path, runs unchanged."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        if func is _SDPA:
            call = attention_call(args, kwargs)
            if call is not None:
                kernel = cuda_kernel(call)
                if kernel is not None:
                    return kernel(call)
        return func(*args, **kwargs)


class ReplayedCalls:
    """A tracer subscriber that keeps `AcceleratorAttention` in force for the model's calls re-run in the backward.

    Autograd runs the backward without the caller's torch function modes (``torch.utils.checkpoint`` re-enters only
    a ``torch.device`` context for its recomputation), so a checkpointed forward recomputed there would take meta's
    math path and save other tensors than its forward did. The tracer publishes those re-run calls as frames
    without parts (`torchscan.tracing.CallTracer.replaying`): the outermost one enters the mode, its end leaves it.
    A forward of the analysis itself (frames with parts) already runs inside `meta_attention`.
    """

    def __init__(self) -> None:
        self.mode = AcceleratorAttention()
        self.depth = 0  # re-run calls open now

    def call_opened(self, frame: Any) -> None:
        if frame.parts is None:
            if self.depth == 0:
                self.mode.__enter__()
            self.depth += 1

    def call_closed(self, frame: Any, call: Any) -> None:
        if frame.parts is None and self.depth:
            self.depth -= 1
            if self.depth == 0:
                self.mode.__exit__(None, None, None)

    def close(self) -> None:
        """Leave the mode if a re-run call never closed (its backward raised past the tracer)."""
        if self.depth:
            self.depth = 0
            self.mode.__exit__(None, None, None)


@dataclass(frozen=True)
class AttentionCall:
    """One ``scaled_dot_product_attention`` call's arguments, by name, with its defaults."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    attn_mask: torch.Tensor | None = None
    dropout_p: float = 0.0
    is_causal: bool = False
    scale: float | None = None
    enable_gqa: bool = False

    @property
    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.query, self.key, self.value

    @property
    def needs_backward(self) -> bool:
        """Whether autograd will run the kernel's backward (``should_compute_logsumexp`` in attention.cpp)."""
        return torch.is_grad_enabled() and any(tensor.requires_grad for tensor in self.tensors)


def attention_call(args: tuple, kwargs: dict[str, Any]) -> AttentionCall | None:
    """The call's arguments by name when it is a call the fused kernels may take: plain dense meta tensors of one
    dtype, a mask (if any) that PyTorch accepts for them; else None (the call runs unchanged and PyTorch checks it)."""
    if len(args) > len(_SDPA_PARAMETERS) or set(kwargs) - set(_SDPA_PARAMETERS[len(args):]):
        return None
    named = dict(zip(_SDPA_PARAMETERS, args, strict=False), **kwargs)
    if not all(name in named for name in _SDPA_PARAMETERS[:3]):
        return None
    call = AttentionCall(**named)
    return call if _on_meta(call) and _valid_mask(call) else None


def _on_meta(call: AttentionCall) -> bool:
    """Plain strided meta tensors of one dtype (a tensor subclass or a nested tensor keeps PyTorch's own path)."""
    tensors = call.tensors
    return (all(type(tensor) in (torch.Tensor, torch.nn.Parameter) for tensor in tensors)
            and all(tensor.device.type == "meta" and not tensor.is_nested for tensor in tensors)
            and len({tensor.dtype for tensor in tensors}) == 1)


def _valid_mask(call: AttentionCall) -> bool:
    """No mask, or a boolean one or one of the query's dtype on meta, and never a mask with ``is_causal``."""
    mask = call.attn_mask
    if mask is None:
        return True
    return (isinstance(mask, torch.Tensor) and mask.device.type == "meta" and not call.is_causal
            and mask.dtype in (torch.bool, call.query.dtype))


# -- CUDA's choice (sdp_utils.cpp, sm80 or newer) ------------------------------------------------------------------


def cuda_kernel(call: AttentionCall) -> Callable[[AttentionCall], torch.Tensor] | None:
    """The fused kernel CUDA's ``select_sdp_backend`` picks for the call, flash before memory-efficient (the
    default priority order), or None where it picks the math path."""
    if all(constraint(call) for constraint in FLASH_CONSTRAINTS):
        return flash_attention
    if all(constraint(call) for constraint in EFFICIENT_CONSTRAINTS):
        return efficient_attention
    return None


def _four_dimensional(call: AttentionCall) -> bool:
    """``check_tensor_shapes``: (batch, heads, length, features) query, key and value."""
    return all(tensor.dim() == 4 for tensor in call.tensors)


def _flash_head_dims(call: AttentionCall) -> bool:
    """``check_head_dim_size_flash``: one head dimension for query, key and value, at most 256."""
    size = call.query.shape[-1]
    return call.key.shape[-1] == call.value.shape[-1] == size and size <= FLASH_MAX_HEAD_DIM


def _batch_and_heads(call: AttentionCall) -> bool:
    """``check_batch_size_and_num_heads_dense``: one batch size; the same number of heads, or with ``enable_gqa``
    key and value heads that divide the query heads (``check_grouped_query_attention``; both kernels support it)."""
    query, key, value = call.tensors
    if not query.shape[0] == key.shape[0] == value.shape[0]:
        return False
    if call.enable_gqa:
        return key.shape[1] == value.shape[1] and query.shape[1] % key.shape[1] == 0
    return query.shape[1] == key.shape[1] == value.shape[1]


def _nonzero_lengths(call: AttentionCall) -> bool:
    """``check_nonzero_sequence_lengths_dense``."""
    return call.query.shape[-2] > 0 and call.key.shape[-2] > 0


def _unit_last_stride(call: AttentionCall, ignore_singleton: bool) -> bool:
    """``check_last_dim_stride_equals_1_dense``: the features (and the mask's keys) are contiguous."""
    strides_one = (all(tensor.stride(-1) == 1 for tensor in call.tensors)
                   or (ignore_singleton and call.query.shape[-1] == 1))
    return strides_one and (call.attn_mask is None or call.attn_mask.stride(-1) == 1)


def _efficient_alignment(call: AttentionCall) -> int:
    """``minimum_gemm_alignment`` on sm80+ with tensor cores: 8 elements for 16-bit types, else 4."""
    return 8 if call.query.dtype in _HALF else 4


def _efficient_head_dims(call: AttentionCall) -> bool:
    """``check_head_dim_size_mem_efficient``: equal query and key features, query and value features aligned."""
    alignment = _efficient_alignment(call)
    query, value = call.query.shape[-1], call.value.shape[-1]
    return (query == call.key.shape[-1] and query > 0 and value > 0
            and query % alignment == 0 and value % alignment == 0)


def _efficient_storage_alignment(call: AttentionCall) -> bool:
    """``check_data_ptr_alignment_mem_efficient`` on sm80+: storage offsets aligned (the caching allocator aligns
    every base pointer to at least 256 bytes)."""
    alignment = _efficient_alignment(call)
    return all(tensor.storage_offset() % alignment == 0 or tensor.numel() == 0 for tensor in call.tensors)

#: Each kernel's constraints, checked in order: a later one may assume an earlier one (four dimensions).
FLASH_CONSTRAINTS: tuple[Callable[[AttentionCall], bool], ...] = (
    lambda call: torch.backends.cuda.flash_sdp_enabled(),  # check_runtime_disabled_flash
    _four_dimensional,
    lambda call: call.attn_mask is None,  # check_for_attn_mask: flash takes no mask
    _flash_head_dims,
    # check_flash_causal_non_square_seqlens: causal flash attention needs as many queries as keys
    lambda call: not call.is_causal or call.query.shape[-2] == call.key.shape[-2],
    lambda call: call.query.dtype in _HALF,  # check_dtypes_flash_attention on sm80+: float16 or bfloat16
    _batch_and_heads, _nonzero_lengths, lambda call: _unit_last_stride(call, ignore_singleton=True))
EFFICIENT_CONSTRAINTS: tuple[Callable[[AttentionCall], bool], ...] = (
    lambda call: torch.backends.cuda.mem_efficient_sdp_enabled(),  # check_runtime_disabled_mem_efficient
    _four_dimensional, _efficient_head_dims, _efficient_storage_alignment, _nonzero_lengths,
    lambda call: _unit_last_stride(call, ignore_singleton=False), _batch_and_heads,
    lambda call: call.query.dtype in (*_HALF, torch.float32))  # the memory-efficient kernel's dtypes on sm80+


# -- the kernels, called as attention.cpp calls them -------------------------------------------------------------


def flash_attention(call: AttentionCall) -> torch.Tensor:
    """``_scaled_dot_product_flash_attention``, its head dimension padded to a multiple of 8 and the output sliced
    back, with the scale of the unpadded head dimension (``pad_last_dim`` / ``post_process_flash_output``)."""
    size = call.query.shape[-1]
    pad = -size % FLASH_HEAD_DIM_ALIGNMENT
    query, key, value = (functional.pad(tensor, (0, pad)) if pad else tensor for tensor in call.tensors)
    scale = call.scale if call.scale is not None or not pad else 1 / math.sqrt(size)
    output = _aten._scaled_dot_product_flash_attention(query, key, value, call.dropout_p, call.is_causal,
                                                       return_debug_mask=False, scale=scale)[0]
    return output[..., :size] if pad else output


def efficient_attention(call: AttentionCall) -> torch.Tensor:
    """``_scaled_dot_product_efficient_attention`` with an additive mask, aligned and expanded to (batch, heads,
    queries, keys) as attention.cpp prepares it, and the log-sum-exp kept when a backward will need it.

    Grouped key/value heads go to the kernel as they are, as on CUDA, unless a backward will run: PyTorch's meta
    backward of this kernel returns key and value gradients with the query's heads, so there they are repeated to the
    query's heads first (``repeat_interleave``, as the math path does).
    """
    query, key, value = call.tensors
    if call.needs_backward and key.shape[1] != query.shape[1]:
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    mask = None if call.attn_mask is None else _efficient_mask(call.attn_mask, query, key)
    return _aten._scaled_dot_product_efficient_attention(query, key, value, mask, call.needs_backward,
                                                         call.dropout_p, call.is_causal, scale=call.scale)[0]


def _efficient_mask(mask: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """``convert_boolean_attn_mask`` then ``preprocess_mask``: a boolean mask becomes 0 / -inf in the query's dtype;
    rows not aligned to 8 elements are padded (and sliced back), then the mask is expanded to every head."""
    if mask.dtype == torch.bool:
        mask = torch.where(mask.logical_not(), -math.inf, torch.scalar_tensor(0.0, dtype=query.dtype,
                                                                               device=mask.device))
    aligned = mask.stride(-1) == 1 and all(stride % MASK_ALIGNMENT == 0 for stride in mask.stride()[:-1])
    if not aligned:
        keys = mask.shape[-1]
        mask = functional.pad(mask, (0, MASK_ALIGNMENT - keys % MASK_ALIGNMENT))[..., :keys]
    return mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])


# -- what the report says --------------------------------------------------------------------------------------------

#: Why the fused kernels' backward FLOPs are what the report counts (`torchscan.formulas.operators.backward_dense`).
_BACKWARD = ("its backward recomputes the scores (priced as torch.utils.flop_counter prices the fused backward: "
             "five products of B·H·L·S·(3D + 2Dv) MACs, QK^T recomputed among them)")
_REASONS = {
    (ACCELERATOR, "flash"): "CUDA's flash attention kernel, assumed on meta (meta_kernels='accelerator': the kernel "
                            "PyTorch picks on an sm80+ GPU for these inputs): the score matrix is never allocated; "
                            + _BACKWARD,
    (ACCELERATOR, "efficient"): "CUDA's memory-efficient attention kernel, assumed on meta "
                                "(meta_kernels='accelerator': the kernel PyTorch picks on an sm80+ GPU for these "
                                "inputs, which flash does not take): the score matrix is never allocated; "
                                + _BACKWARD,
    (ACCELERATOR, "math"): "PyTorch's math attention path ran (scaled_dot_product_attention decomposed into products "
                           "and a softmax): the score matrix is materialized; on meta with meta_kernels='accelerator' "
                           "that is CUDA's choice for these inputs (no fused kernel takes them), or the attention ran "
                           "inside a torch function that the routing does not see into (nn.MultiheadAttention's "
                           "functional forward)",
    (MATH, "math"): "PyTorch's math attention path ran (scaled_dot_product_attention decomposed into products and a "
                    "softmax): the score matrix is materialized, as asked (meta_kernels='math': meta's own kernels; "
                    "an accelerator's fused kernels would not allocate it)",
}


def kernel_reason(choice: str | None, kernel: str) -> str | None:
    """The memory section's reason for ``kernel`` on meta under ``choice`` (None: the kernel's usual reason)."""
    return None if choice is None else _REASONS.get((choice, kernel))
