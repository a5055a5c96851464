"""Traced memory: the bytes of live tensors after every operator, followed through dispatch, on any device.

`MemoryTimeline` is fed the events an operator recorder sees (``func``, ``args``, ``kwargs`` and ``out`` of each
dispatched ATen call). It follows every tensor storage from the operator that creates it until it is freed: a
storage is keyed by the identity of its ``UntypedStorage`` Python object, which PyTorch preserves for as long as
the storage lives (views and shared storages are counted once, and meta storages, whose ``data_ptr`` is always
0, are told apart), and a weak reference to that object reports the free. Storages first seen as an operator's
input existed before the trace began: they are the ``pre_existing`` category, and the peak is measured above
them, as `torchscan.measure_peak_memory` measures.

The trace counts the bytes of tensors, exclusive of allocator caching, fragmentation and kernel workspaces
(memory a kernel allocates and frees inside one operator). ``trace_memory`` runs a workload under its own thin
dispatch mode; the crawler's recorder can feed the same timeline to attribute memory to layer calls.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..operators import operator_name
from ..results import MODEL, TRACED_LIVE_TENSOR_BYTES, MetricResult, complete, lower_bound, unavailable
from ..values import tensors_in

METHOD = TRACED_LIVE_TENSOR_BYTES
UNIT = "bytes"
#: Categories a storage gets when first seen; a caller may relabel storages later (`MemoryTimeline.label`).
PRE_EXISTING, CREATED = "pre_existing", "created"
#: ``torch.tensor(...)`` builds its tensor outside dispatch and hands it to this operator: its input is new.
LIFT_FRESH = torch.ops.aten.lift_fresh.default
NOT_TRACED = ("allocator caching and fragmentation, kernel workspaces (memory an operator allocates and frees "
              "inside itself) and tensors freed before the trace saw them are not counted")


class StorageRecord:
    """One storage the timeline followed: its bytes, category, origin and life in operator indices.

    ``created_at`` is the index of the operator that created it (-1 when it existed before the trace);
    ``freed_after`` is the number of operators that had returned when it was freed (None while it lives), so it
    is live after operator ``i`` exactly when ``created_at <= i < freed_after``.
    """

    __slots__ = ("category", "created_at", "device", "freed_after", "nbytes", "pre_existing")

    def __init__(self, nbytes: int, device: torch.device, created_at: int) -> None:
        self.nbytes = nbytes
        self.device = device
        self.created_at = created_at
        self.pre_existing = created_at < 0
        self.category = PRE_EXISTING if self.pre_existing else CREATED
        self.freed_after: int | None = None

    def live_after(self, index: int) -> bool:
        return self.created_at <= index and (self.freed_after is None or index < self.freed_after)


class MemoryTimeline:
    """Live tensor bytes after every recorded operator, above the level at the start of the trace: `record` each
    dispatched operator, `close` it, then read `summary`. ``device`` limits the trace to storages on that device (any
    index of its type when it names none); None follows every device."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.device = device
        self.records: list[StorageRecord] = []
        self.operators: list[Any] = []  # the overload of each recorded operator, in order
        self.levels: list[int] = []  # bytes above the start after each operator
        self.level = 0
        self.peak = 0
        self.peak_index: int | None = None  # the operator after which the peak was first reached
        self.untracked = 0  # result tensors whose storage could not be followed (sparse layouts, for instance)
        self._following: dict[int, tuple[weakref.ref, StorageRecord]] | None = {}

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        """One operator returned ``out``: adopt the storages of its inputs not seen before (they existed before the
        trace, except for ``lift_fresh``'s), follow those of its result, and note the level after it."""
        following = self._following
        if following is None:
            return
        index = len(self.operators)
        if func is not LIFT_FRESH:
            inputs = tensors_in(args)
            if kwargs:
                inputs += tensors_in(kwargs)
            for tensor in inputs:
                self._follow(following, tensor, -1)
        for tensor in tensors_in(out):
            if not self._follow(following, tensor, index):
                self.untracked += 1
        self.operators.append(func)
        level = self.level
        self.levels.append(level)
        if level > self.peak:
            self.peak, self.peak_index = level, index

    def _follow(self, following: dict[int, tuple[weakref.ref, StorageRecord]], tensor: torch.Tensor, index: int
                ) -> bool:
        """Follow ``tensor``'s storage (created by operator ``index``, or pre-existing when -1) unless it is
        followed already, in which case a result's change of size is booked; False when it cannot be followed."""
        wanted = self.device
        if wanted is not None and (tensor.device.type != wanted.type
                                   or wanted.index is not None and tensor.device.index != wanted.index):
            return True
        try:
            storage = tensor.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return False
        key = id(storage)
        known = following.get(key)
        if known is not None:
            if index >= 0:
                self._resized(known[1], storage.nbytes())
            return True
        record = StorageRecord(storage.nbytes(), tensor.device, index)
        following[key] = (weakref.ref(storage, self._free_callback(key, record)), record)
        self.records.append(record)
        if index >= 0:
            self.level += record.nbytes
        return True

    def _resized(self, record: StorageRecord, nbytes: int) -> None:
        """An operator resized a followed storage (an ``out=`` argument): the difference is allocated or freed."""
        if nbytes != record.nbytes:
            self.level += nbytes - record.nbytes
            record.nbytes = nbytes

    def _free_callback(self, key: int, record: StorageRecord) -> Callable[[weakref.ref], None]:
        def freed(_: weakref.ref) -> None:
            following = self._following
            if following is None:
                return
            following.pop(key, None)
            record.freed_after = len(self.operators)
            self.level -= record.nbytes
        return freed

    def adopt(self, tensor: torch.Tensor, category: str) -> None:
        """Follow ``tensor``'s storage as one that existed before the trace, filed under ``category`` (parameters,
        buffers, inputs); a storage followed already keeps its category (a tied weight is filed once)."""
        following = self._following
        if following is None or id(tensor.untyped_storage()) in following:
            return
        if self._follow(following, tensor, -1):
            self.label(tensor, category)

    def followed(self, tensor: torch.Tensor) -> StorageRecord | None:
        """The record of ``tensor``'s storage while the timeline follows it, else None."""
        known = (self._following or {}).get(id(tensor.untyped_storage()))
        return None if known is None else known[1]

    def label(self, tensor: torch.Tensor, category: str) -> bool:
        """File ``tensor``'s followed storage under ``category`` (gradients, optimizer state, ...); False when
        the timeline does not follow it. Categories split what is live; they never change the level."""
        if not isinstance(category, str) or not category:
            raise ValueError(f"category must be a non-empty string, got {category!r}")
        known = (self._following or {}).get(id(tensor.untyped_storage()))
        if known is None:
            return False
        known[1].category = category
        return True

    def close(self) -> None:
        """Stop following: frees after this no longer change the timeline, and no weak reference stays behind."""
        self._following = None

    def live_at(self, index: int) -> dict[str, int]:
        """Bytes of the followed storages live after operator ``index``, by category, in first-seen order."""
        live: dict[str, int] = {PRE_EXISTING: 0, CREATED: 0}
        for record in self.records:
            if record.live_after(index):
                live[record.category] = live.get(record.category, 0) + record.nbytes
        return live

    def created_live_at(self, index: int) -> int:
        """Bytes of the storages the trace created (whatever their label now) live after operator ``index``."""
        return sum(record.nbytes for record in self.records if not record.pre_existing and record.live_after(index))

    def freed_before(self, index: int) -> int:
        """Bytes of pre-existing storages freed before the level after operator ``index`` was noted."""
        return sum(record.nbytes for record in self.records
                   if record.pre_existing and record.freed_after is not None and record.freed_after <= index)

    def summary(self) -> dict[str, Any]:
        """The timeline as plain data: the peak above the start, what is live at the peak and at the end by
        category, the operator at the peak, and the level after every operator."""
        at = -1 if self.peak_index is None else self.peak_index
        names = [operator_label(func) for func in self.operators]
        return {
            "method": METHOD,
            "devices": sorted({str(record.device) for record in self.records}),
            "operators": len(names),
            "peak": self._bytes(self.peak),
            "peak_operator": None if self.peak_index is None else {"index": at, "operator": names[at]},
            "at_peak": self._by_category(self.live_at(at)),
            "pre_existing_freed_before_peak": self._bytes(self.freed_before(at)),
            "at_end": self._by_category(self.live_at(len(names))),
            "timeline": [{"operator": name, "bytes": level} for name, level in zip(names, self.levels, strict=True)],
            "untracked_outputs": self.untracked,
        }

    def _by_category(self, live: dict[str, int]) -> dict[str, MetricResult]:
        return {category: self._bytes(value) for category, value in live.items()}

    def _bytes(self, value: int) -> MetricResult:
        """``value`` bytes: unavailable if no storage was seen, a lower bound if some result could not be followed."""
        if not self.records and not self.untracked:
            return unavailable(UNIT, MODEL, METHOD)
        return (lower_bound if self.untracked else complete)(value, UNIT, MODEL, METHOD)


def operator_label(func: Any) -> str:
    """``aten.mm`` for ``aten.mm.default``: the name the operator reports use."""
    return operator_name(getattr(func, "overloadpacket", func))


class Recording(Protocol):
    """What a dispatch mode feeds: a `MemoryTimeline`, or a probe that feeds one (`.memory_report`)."""

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None: ...


class TraceMode(TorchDispatchMode):
    """The thin dispatch mode of `trace_memory`: runs each operator and feeds its event to a timeline."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch would otherwise wrap __torch_dispatch__ to import torch._dynamo on first use (about a second).
        return False

    def __init__(self, timeline: Recording) -> None:
        super().__init__()
        self.timeline = timeline

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.timeline.record(func, args, kwargs, out)
        return out


def trace_memory(workload: Callable[[], Any], *, device: torch.device | str | None = None) -> dict[str, Any]:
    """Run ``workload()`` once and trace the bytes of live tensors after every operator it dispatches.

    Works on any device, ``meta`` included, because it reads tensor sizes, never the allocator. Tensors that
    exist before the workload (parameters, inputs, optimizer state: those its operators use) are the
    ``pre_existing`` category, and storages its operators create are ``created``; ``peak``
    is the most bytes live above the level at the start (the definition of `measure_peak_memory`), reached after
    the operator ``peak_operator`` names. ``at_peak`` and ``at_end`` split the live bytes by category at the
    peak and when the workload returned (its return value included); ``timeline`` gives the bytes above the
    start after each operator (negative once the workload freed tensors that existed before it). ``device``
    limits the trace to tensors on that device (any index of its type when it names none); None follows every
    device, and ``devices`` lists those seen. Every byte count is a MetricResult whose ``method`` is
    ``traced_live_tensor_bytes``: the bytes of live tensors, exclusive of allocator caching, fragmentation and
    kernel workspaces; ``unavailable`` when the workload touched no tensor on the traced device, a lower bound
    when some result tensor had no storage to follow (``untracked_outputs``). The workload's errors propagate,
    and no dispatch mode or weak reference stays behind.
    """
    if not callable(workload):
        raise TypeError(f"workload must be a callable taking no arguments, got {type(workload).__name__}")
    target = _traced_device(device)
    timeline = MemoryTimeline(target)
    try:
        with TraceMode(timeline):
            result = workload()
    finally:
        timeline.close()
    del result
    summary = timeline.summary()
    summary["device"] = None if target is None else str(target)
    summary["message"] = _message(summary)
    return summary


def _traced_device(device: Any) -> torch.device | None:
    """``device`` as a ``torch.device`` (None stays None), or a ValueError that names the argument."""
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device must be None or a device such as 'cpu', 'cuda:0' or 'meta', got {device!r}"
                         ) from error


def _message(summary: dict[str, Any]) -> str:
    where = ", ".join(summary["devices"]) or "no device"
    if summary["peak"]["status"] == "unavailable":
        return (f"the workload dispatched no operator on a tensor of the traced device ({summary['device']}), so "
                f"its peak is unknown rather than zero: did it run on another device?")
    return f"peak of live tensor bytes on {where} above the level at the start; {NOT_TRACED}"
