"""The memory section of a ``crawl_module`` report: the traced timeline of one forward, attributed to layer calls.

`ForwardMemory` is fed by the analysis's operator recorder (or, in ``mode="structure"``, by a thin dispatch mode of
its own) with every dispatched operator, and by the tracer, to which it subscribes, with every layer call. It
follows the storages of the parameters, buffers and inputs from the start (their own categories of the timeline),
notes which layer call was open when the peak was reached, each call's output bytes and the live bytes at its end,
counts activations in fvcore's convention and names the attention kernel that ran. `memory_section` turns it into
the report's ``memory`` section, the ``forward_peak_bytes`` and ``activations`` totals and each record's ``memory``.
Nothing here runs unless the caller asked for memory: the recorder checks its list of listeners per operator.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..calls.meta_kernels import kernel_reason
from ..diagnostics import Diagnostic, diagnostic
from ..operators import OperatorRecorder
from ..results import MODEL, MODULE_CALL, MetricResult, Scope, complete, lower_bound, unavailable
from ..tracing import CallTracer, Finished, Frame, open_call
from ..values import tensors_in

if TYPE_CHECKING:
    from ..calls.stand_ins import StandIns
    from ..records import CallParts
from .output_cache import OutputCache, output_cache
from .timeline import METHOD, PRE_EXISTING, MemoryTimeline, TraceMode, operator_label

ACTIVATIONS_METHOD = "fvcore_activation_count"
PARAMETERS, BUFFERS, INPUTS, ACTIVATIONS = "parameters", "buffers", "inputs", "activations"

_aten = torch.ops.aten
#: Operators whose output elements fvcore's ActivationCountAnalysis counts, as they reach dispatch: its
#: ``_convolution``, ``addmm``, ``bmm``, ``einsum``, ``matmul`` and ``linear`` become these (matmul, linear and einsum
#: decompose into mm, addmm, bmm, mv and dot with the same number of output elements).
PRODUCT_OPERATORS = frozenset({_aten.convolution, _aten.addmm, _aten.mm, _aten.bmm, _aten.baddbmm, _aten.mv,
                               _aten.dot})
#: Fused attention kernels, by the name the report gives the kernel; all take (batch, heads, length, features)
#: tensors. The math path has no operator of its own: it decomposes into products, and ``_safe_softmax`` (used only
#: there) marks it.
ATTENTION_KERNELS: dict[Any, str] = {
    _aten._scaled_dot_product_flash_attention: "flash",
    _aten._scaled_dot_product_flash_attention_for_cpu: "flash",
    _aten._scaled_dot_product_efficient_attention: "efficient",
    _aten._scaled_dot_product_cudnn_attention: "cudnn",
    _aten._safe_softmax: "math",
}
#: Fused recurrent layer kernels, whose gate products happen inside the kernel where no product operator is
#: dispatched: the activation count cannot see them, so it becomes a lower bound (``fused_recurrent_kernel``). On CPU
#: an LSTM runs oneDNN's layer kernel; elsewhere on CPU and on meta a recurrent layer decomposes into the products
#: the count sees, and a fused cell kernel (``_thnn_fused_lstm_cell``) takes gates whose products were dispatched.
RECURRENT_KERNELS = frozenset(getattr(_aten, name) for name in (
    "mkldnn_rnn_layer", "_cudnn_rnn", "miopen_rnn", "lstm", "gru", "rnn_tanh", "rnn_relu", "_lstm_mps")
    if hasattr(_aten, name))
KERNEL_REASONS = {
    "math": "PyTorch's math attention path ran (scaled_dot_product_attention decomposed into products and a "
            "softmax): the score matrix is materialized, as on meta, where no fused kernel exists",
    "flash": "a flash attention kernel ran: the score matrix is never allocated",
    "efficient": "the memory-efficient attention kernel ran: the score matrix is never allocated",
    "cudnn": "cuDNN's attention kernel ran: the score matrix is never allocated",
    "none": "no scaled_dot_product_attention kernel ran; attention written as separate operators, if any, is "
            "traced as those operators ran",
}
#: ``nn.MultiheadAttention``'s fused inference fast path: one operator for the projections, the attention and the
#: output projection, whose attention happens inside the kernel (`native_attention_reason`).
NATIVE_MHA = "native_mha"
_NATIVE_MHA_RAN = ("nn.MultiheadAttention's fused inference fast path ran (aten._native_multi_head_attention: the "
                   "projections, the attention and the output projection in one operator)")


def attention_products(args: tuple) -> int:
    """fvcore's convention for a fused attention kernel: the elements of its two products, the score matrix
    (batch x heads x queries x keys) and the output (batch x heads x queries x value features)."""
    query, key, value = args[0], args[1], args[2]
    *batch, queries, _ = query.shape
    rows = queries * math.prod(batch)
    return rows * key.shape[-2] + rows * value.shape[-1]


def native_attention_sizes(args: tuple) -> tuple[int, int]:
    """``nn.MultiheadAttention``'s fused inference fast path (``_native_multi_head_attention(query, key, value,
    embed_dim, heads, ...)``): fvcore's convention for it, the outputs of the products the unfused path runs (the
    query, key and value projections, the score matrix, the attention output and the output projection), and the
    bytes of the score matrix (batch x heads x queries x keys) that its CPU kernel computes inside itself."""
    query, key, embed_dim, heads = args[0], args[1], int(args[3]), int(args[4])
    *batch, queries, _ = query.shape
    rows, keys = math.prod(batch), key.shape[-2]
    products = rows * (3 * queries * embed_dim + 2 * keys * embed_dim + heads * queries * keys)
    return products, rows * heads * queries * keys * query.element_size()


def native_attention_reason(device_type: str, score_bytes: int) -> str:
    """Why ``native_mha``'s memory is what the trace shows on ``device_type``: its attention happens inside the
    kernel, which allocates and frees its scratch there, a kernel workspace the trace does not count."""
    scores = f"{score_bytes:,} bytes at the largest here"
    if device_type == "cpu":
        return (f"{_NATIVE_MHA_RAN}: on CPU the kernel computes the score matrix inside itself (a batched matmul, "
                f"then an in-place softmax) and frees it before it returns, a kernel workspace that the trace does "
                f"not count ({scores})")
    if device_type == "cuda":
        return (f"{_NATIVE_MHA_RAN}: on CUDA, for self-attention without a mask or returned weights and with head "
                f"widths a fused kernel supports, the kernel runs a fused scaled_dot_product_attention kernel inside "
                f"itself (no score matrix), else it computes the score matrix inside itself ({scores}); either is a "
                f"kernel workspace that the trace does not count")
    return (f"{_NATIVE_MHA_RAN}: on {device_type} only its outputs exist; on CPU the kernel computes the score matrix "
            f"inside itself ({scores}), a kernel workspace that the trace does not count")


def tensor_bytes(value: Any) -> int:
    """The bytes of the elements of the tensors in ``value`` (each tensor once, a view as its own size)."""
    return sum({id(tensor): tensor.numel() * tensor.element_size() for tensor in tensors_in(value)}.values())


class ForwardMemory:
    """The traced memory of one forward, attributed to the layer calls that the tracer's ``stack`` holds open."""

    def __init__(self, stack: list[Frame], device: torch.device, stand_ins: StandIns | None = None,
                 meta_kernels: str | None = None) -> None:
        self.timeline = MemoryTimeline(None)
        self.device = device
        self.stand_ins = stand_ins  # the trace runs on fake-tensor stand-ins (its sections say so)
        self.meta_kernels = meta_kernels  # on meta: the attention kernels asked for (`torchscan.calls.meta_kernels`)
        self.stack = stack  # the tracer's open frames (their ``record`` names the call)
        self.peak_at: dict[str, Any] | None = None  # the layer call open when the peak was first reached
        self.activations = 0
        self.kernels: dict[str, None] = {}  # attention kernels, in first-seen order (an ordered set)
        self.native_scores = 0  # the largest score matrix a fused MultiheadAttention computed inside its kernel
        self.recurrent: dict[str, dict[str, Any] | None] = {}  # fused recurrent kernel -> the call it first ran in
        self.output_cache: OutputCache | None = None  # the KV caches the model's output holds
        self.ends: dict[int, tuple[int, int]] = {}  # id(record) -> (output bytes, level at the call's end)

    def adopt(self, tensors: Iterable[torch.Tensor], category: str) -> None:
        """Follow tensors that exist before the forward under ``category`` (storages already followed keep theirs)."""
        for tensor in tensors:
            self.timeline.adopt(tensor, category)

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        """One dispatched operator: the timeline, the layer call at a new peak, activations and attention."""
        timeline = self.timeline
        peak = timeline.peak
        timeline.record(func, args, kwargs, out)
        if timeline.peak != peak:
            self.peak_at = open_call(self.stack)
        packet = getattr(func, "overloadpacket", None)
        if packet in PRODUCT_OPERATORS:
            self.activations += out.numel() if isinstance(out, torch.Tensor) else 0
        elif packet in ATTENTION_KERNELS:
            kernel = ATTENTION_KERNELS[packet]
            self.kernels[kernel] = None
            if kernel != "math":  # the math path's products are counted as products
                self.activations += attention_products(args)
        elif packet is _aten._native_multi_head_attention:
            products, scores = native_attention_sizes(args)
            self.activations += products
            self.kernels[NATIVE_MHA] = None
            self.native_scores = max(self.native_scores, scores)
        elif packet in RECURRENT_KERNELS and operator_label(func) not in self.recurrent:
            self.recurrent[operator_label(func)] = open_call(self.stack)

    def attention_kernel(self) -> dict[str, str]:
        """The report's ``attention_kernel`` for the kernels this forward ran (on stand-ins, and on meta with
        ``meta_kernels``, its reason says so)."""
        reasons = {NATIVE_MHA: native_attention_reason(self.device.type, self.native_scores)}
        for name in self.kernels:
            meta_reason = kernel_reason(self.meta_kernels, name)
            if meta_reason is not None:
                reasons[name] = meta_reason
        kernel = attention_kernel(list(self.kernels), reasons)
        if self.stand_ins is not None:
            kernel["reason"] += self.stand_ins.kernel_note()
        return kernel

    def diagnostics(self) -> list[Diagnostic]:
        """One ``fused_recurrent_kernel`` per fused recurrent kernel that ran, at the call it first ran in."""
        return [diagnostic("fused_recurrent_kernel", f"{kernel} ran: its gate products happen inside the kernel, "
                           "where the activation count (fvcore's convention) cannot see them, so the activations are "
                           "a lower bound", metric="activations", **(where or {}))
                for kernel, where in self.recurrent.items()]

    def stand_ins_field(self) -> dict[str, Any]:
        """A memory section's ``stand_ins`` field when the trace ran on stand-ins (else nothing)."""
        return {} if self.stand_ins is None else {"stand_ins": self.stand_ins.record()}

    def call_opened(self, frame: Frame) -> None:
        """A call opened: nothing to note (the peak reads the open call from the tracer's stack)."""

    def call_closed(self, frame: Frame, call: Finished | None) -> None:
        """A call ended: note its output bytes and the level now, and for the model's own call the caches it returns."""
        if frame.parts is not None:
            output = 0 if call is None else tensor_bytes(call.output)
            self.ends[id(frame.parts)] = (output, self.timeline.level)
            if frame.parts.parent is None and call is not None:
                self.output_cache = output_cache(call.output, self.timeline)

    def close(self) -> None:
        self.timeline.close()


def attention_kernel(kernels: list[str], reasons: Mapping[str, str] | None = None) -> dict[str, str]:
    """The report's ``attention_kernel``: the kernel that ran (several are named in the reason), or ``none``;
    ``reasons`` gives the reasons of kernels whose reason depends on the trace (``native_mha``)."""
    if not kernels:
        return {"name": "none", "reason": KERNEL_REASONS["none"]}
    reason = (reasons or {}).get(kernels[0]) or KERNEL_REASONS[kernels[0]]
    if len(kernels) > 1:
        reason += f" (kernels seen, in order: {', '.join(kernels)})"
    return {"name": kernels[0], "reason": reason}


def traced_bytes(value: int, partial: bool, scope: Scope = MODEL) -> MetricResult:
    return (lower_bound if partial else complete)(value, "bytes", scope, METHOD)


def memory_section(probe: ForwardMemory) -> dict[str, Any]:
    """The report's ``memory`` section of a traced forward."""
    timeline = probe.timeline
    partial = timeline.untracked > 0
    at = -1 if timeline.peak_index is None else timeline.peak_index
    live = timeline.live_at(at)
    # activations: every storage the forward created, those a training step labelled (saved ones) included
    at_peak = {PARAMETERS: live.get(PARAMETERS, 0), BUFFERS: live.get(BUFFERS, 0) + live[PRE_EXISTING],
               INPUTS: live.get(INPUTS, 0), ACTIVATIONS: timeline.created_live_at(at)}
    return {
        "method": METHOD,
        "device": str(probe.device),
        "attention_kernel": probe.attention_kernel(),
        "peak": traced_bytes(sum(at_peak.values()), partial),
        "peak_above_start": traced_bytes(timeline.peak, partial),
        "at_peak": {name: traced_bytes(value, partial) for name, value in at_peak.items()},
        "peak_at": {"layer": None if probe.peak_at is None else dict(probe.peak_at),
                    "operator": operator_label(timeline.operators[at]) if timeline.operators else None,
                    "operator_index": at},
        "activations": activation_count(probe.activations, bool(timeline.operators), bool(probe.recurrent)),
        **({} if probe.output_cache is None else {"output_cache": probe.output_cache.field(timeline.peak_index)}),
        **probe.stand_ins_field(),
    }


def memory_totals(section: dict[str, Any]) -> dict[str, MetricResult]:
    """The report's memory totals, from its memory section: ``forward_peak_bytes`` and ``activations``."""
    return {"forward_peak_bytes": dict(section["peak_above_start"]),  # type: ignore[dict-item]
            "activations": dict(section["activations"])}  # type: ignore[dict-item]


def layer_memories(probe: ForwardMemory) -> Callable[[CallParts], dict[str, MetricResult]]:
    """Each layer record's ``memory``, by its call's parts: the call's output bytes and the live bytes at its end
    (``base``, the bytes that existed before the forward, included)."""
    timeline = probe.timeline
    base = sum(record.nbytes for record in timeline.records if record.pre_existing)
    partial = timeline.untracked > 0
    def memory(parts: CallParts) -> dict[str, MetricResult]:
        output, level = probe.ends.get(id(parts), (0, 0))
        return {"output_bytes": traced_bytes(output, False, MODULE_CALL),
                "live_bytes_at_end": traced_bytes(base + level, partial, MODULE_CALL)}
    return memory


def activation_count(count: int, observed: bool, hidden: bool = False) -> MetricResult:
    """The fvcore activation count as a result; unavailable when no operator was observed at all, a lower bound when
    some kernel ran with its products ``hidden`` (a fused recurrent layer)."""
    if not observed:
        return unavailable("activations", MODEL, ACTIVATIONS_METHOD)
    return (lower_bound if hidden else complete)(count, "activations", MODEL, ACTIVATIONS_METHOD)


def trace_device(model: nn.Module, args: tuple, kwargs: dict[str, Any]) -> torch.device:
    """The device the trace runs on: that of the first input tensor, else of the first parameter or buffer."""
    tensors = itertools.chain(tensors_in(args), tensors_in(kwargs), model.parameters(), model.buffers())
    return next((tensor.device for tensor in tensors), torch.device("cpu"))


@functools.cache
def _load_meta_kernels() -> None:
    """Run one operator on ``meta`` before the first traced forward there.

    PyTorch imports its meta kernels (some 800 modules) on the first ``meta`` operator of a process, and the
    exceptions that importing raises and catches leave reference cycles through the frames of the running forward:
    with the cyclic collector paused for the analysis, they would keep that forward's tensors alive.
    """
    torch.empty(1, device="meta").add(1)


@contextmanager
def traced_forward(model: nn.Module, args: tuple, kwargs: dict[str, Any], tracer: CallTracer,
                   recorder: OperatorRecorder | None, stand_ins: StandIns | None,
                   meta_kernels: str | None = None) -> Iterator[ForwardMemory]:
    """Trace the memory of the forward run inside the block: the probe follows the parameters, buffers and inputs,
    subscribes to the tracer's calls, and is fed by ``recorder`` (a full
    analysis) or by a dispatch mode of its own (``mode="structure"``, which has no recorder). The probe's timeline
    stays open: its owner closes it (a training step continues it through the backward). ``meta_kernels`` is the
    analysis's choice of attention kernels on meta (None elsewhere), which the attention kernel's reason names."""
    probe = ForwardMemory(tracer.stack, trace_device(model, args, kwargs), stand_ins, meta_kernels)
    if probe.device.type == "meta":
        _load_meta_kernels()
    probe.adopt(model.parameters(), PARAMETERS)
    probe.adopt(model.buffers(), BUFFERS)
    probe.adopt([*tensors_in(args), *tensors_in(kwargs)], INPUTS)
    with tracer.subscribed(probe), TraceMode(probe) if recorder is None else recorder.listening(probe):
        yield probe
    tracer.diagnostics.extend(probe.diagnostics())
