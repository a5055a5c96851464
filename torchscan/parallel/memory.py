"""One rank's traced memory through a sharded step: what `MemoryTimeline` sees, plus what FSDP2 does beside dispatch.

`RankTimeline` is the memory timeline of `torchscan.memory.timeline` with two additions that sharded training needs:

- **Wrapper subclasses.** A ``DTensor`` (FSDP2's sharded parameters, their gradients and the optimizer state built
  from them) is a wrapper whose own storage has the *global* size; the bytes this rank holds are those of its
  local tensor. The timeline follows the inner tensors a wrapper names in ``__tensor_flatten__`` (PyTorch's
  protocol for traceable wrapper subclasses) instead of the wrapper.
- **Storage resizes.** FSDP2 frees an all-gathered parameter by resizing its storage to zero bytes and allocates it
  again by resizing it back (``UntypedStorage.resize_``), outside dispatch, so no operator shows it. `resizes`
  patches ``torch.UntypedStorage.resize_`` for the length of a block (PyTorch's own memory tracker,
  ``torch.distributed._tools.mem_tracker``, does the same, for the same reason) and tells the timeline: a resize is
  the free of the storage's old bytes and the allocation of its new ones, a step of the timeline of its own (named
  `RESIZE`), so that a peak reached by FSDP2's allocation of unsharded parameters is named as such.

`Labels` files storages under what they are, by how they were created (categories split what is live, never the
level): the sharded parameters, buffers, inputs and optimizer state that exist at the step's start (adopted); the
flat buffer a collective all-gathers into (``all_gather_buffers``); the per-parameter copies out of it, which are
the unsharded parameters in flight (``unsharded_parameters``; also any plain ``nn.Parameter`` an operator reads,
which is how replication's unsharded copies are found); the unsharded gradients FSDP2 concatenates for its
reduce-scatter (``unsharded_gradients``) and the buffers that collective reads and writes
(``reduce_scatter_buffers``); the gradient shards the optimizer reads (``gradient_shards``, labelled when the backward
ends); autograd's saved tensors (``saved_activations``, as `torchscan.memory.training_step` finds them). What is left
is ``temporaries``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from ..memory.timeline import CREATED, PRE_EXISTING, MemoryTimeline, StorageRecord
from ..values import tensors_in

SHARDED_PARAMETERS, UNSHARDED_PARAMETERS = "sharded_parameters", "unsharded_parameters"
ALL_GATHER_BUFFERS, REDUCE_SCATTER_BUFFERS = "all_gather_buffers", "reduce_scatter_buffers"
GRADIENT_SHARDS, UNSHARDED_GRADIENTS = "gradient_shards", "unsharded_gradients"
OPTIMIZER_STATE, SAVED, TEMPORARIES = "optimizer_state", "saved_activations", "temporaries"
INPUTS, BUFFERS = "inputs", "buffers"
#: The timeline's name for a storage resize (it is a step of its own: the peak may be reached by one).
RESIZE = "UntypedStorage.resize_"
#: The categories of a rank's live bytes, in report order (``temporaries`` is what no other one claims).
CATEGORIES = (SHARDED_PARAMETERS, UNSHARDED_PARAMETERS, ALL_GATHER_BUFFERS, GRADIENT_SHARDS, UNSHARDED_GRADIENTS,
              REDUCE_SCATTER_BUFFERS, OPTIMIZER_STATE, SAVED, TEMPORARIES, INPUTS, BUFFERS)


def local_tensors(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors that hold ``tensor``'s bytes on this rank: the inner tensors of a wrapper subclass (a
    ``DTensor``'s local shard), else the tensor itself."""
    if not is_traceable_wrapper_subclass(tensor):
        return [tensor]
    names, _ = tensor.__tensor_flatten__()
    inner = [getattr(tensor, name) for name in names]
    return [plain for part in inner if isinstance(part, torch.Tensor) for plain in local_tensors(part)]


class RankTimeline(MemoryTimeline):
    """A `MemoryTimeline` that follows wrapper subclasses through their local tensors and books storage resizes."""

    def _follow(self, following: dict[int, tuple[weakref.ref, StorageRecord]], tensor: torch.Tensor, index: int
                ) -> bool:
        if not is_traceable_wrapper_subclass(tensor):
            return super()._follow(following, tensor, index)
        followed = True
        for inner in local_tensors(tensor):  # every inner tensor, even after one that cannot be followed
            followed = super()._follow(following, inner, index) and followed
        return followed

    def followed(self, tensor: torch.Tensor) -> StorageRecord | None:
        """The record of the storage behind ``tensor`` (a wrapper's first local tensor), else None."""
        inner = next(iter(local_tensors(tensor)), None)
        return None if inner is None else super().followed(inner)

    def label(self, tensor: torch.Tensor, category: str) -> bool:
        labelled = True
        for inner in local_tensors(tensor):
            labelled = super().label(inner, category) and labelled
        return labelled

    def adopt(self, tensor: torch.Tensor, category: str) -> None:
        for inner in local_tensors(tensor):
            super().adopt(inner, category)

    def _free_callback(self, key: int, record: StorageRecord) -> Callable[[weakref.ref], None]:
        """The free of whatever record the storage has when it dies (a resize may have replaced the first)."""
        def freed(_: weakref.ref) -> None:
            following = self._following
            entry = None if following is None else following.pop(key, None)
            if entry is not None:
                entry[1].freed_after = len(self.operators)
                self.level -= entry[1].nbytes
        return freed

    def _resized(self, record: StorageRecord, nbytes: int) -> None:
        """An operator resized a followed storage (an ``out=`` argument): the old bytes freed, the new allocated."""
        if nbytes == record.nbytes:
            return
        for key, (ref, known) in list((self._following or {}).items()):
            if known is record:
                self._replace(key, ref, record, nbytes)
                return

    def storage_resized(self, storage: torch.UntypedStorage, before: int) -> None:
        """``storage`` was resized outside dispatch from ``before`` bytes to its present size."""
        following = self._following
        now = storage.nbytes()
        if following is None or now == before:
            return
        key = id(storage)
        known = following.get(key)
        if known is None:  # first seen now: it held ``before`` bytes since before the trace
            record = StorageRecord(before, storage.device, -1)
            ref = weakref.ref(storage, self._free_callback(key, record))
            following[key] = (ref, record)
            self.records.append(record)
            known = (ref, record)
        self._replace(key, known[0], known[1], now)
        self._note(RESIZE)

    def _note(self, event: Any) -> None:
        """A step of the timeline that is not a dispatched operator (a resize): the level after it is noted."""
        index = len(self.operators)
        self.operators.append(event)
        self.levels.append(self.level)
        if self.level > self.peak:
            self.peak, self.peak_index = self.level, index

    def _replace(self, key: int, ref: weakref.ref, record: StorageRecord, nbytes: int) -> None:
        """Close ``record`` now (freed after the operators that had returned) and follow the storage under a new
        record of ``nbytes`` and the same category, so that what was live after each operator stays exact."""
        at = len(self.operators)
        record.freed_after = at
        self.level -= record.nbytes
        fresh = StorageRecord(nbytes, record.device, at)
        fresh.category = CREATED if record.category == PRE_EXISTING else record.category
        assert self._following is not None
        self._following[key] = (ref, fresh)
        self.records.append(fresh)
        self.level += nbytes


@contextmanager
def resizes(listener: Callable[[torch.UntypedStorage, int], None]) -> Iterator[None]:
    """Tell ``listener(storage, bytes_before)`` of every ``UntypedStorage.resize_`` in the block (they bypass
    dispatch); the class is exactly as it was afterwards, also after an error. The patch is the process's: a resize
    another thread makes meanwhile is told too (the analysis runs its step on one thread)."""
    cls = torch.UntypedStorage
    own = "resize_" in vars(cls)
    original = cls.resize_

    def resize_(storage: torch.UntypedStorage, size: int) -> Any:
        before = storage.nbytes()
        result = original(storage, size)
        listener(storage, before)
        return result

    cls.resize_ = resize_  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        if own:
            cls.resize_ = original  # type: ignore[method-assign]
        else:
            del cls.resize_


class Labels:
    """Files the storages a sharded step creates under what they are, from the operators that create or read them.

    Fed with each dispatched operator after the timeline (so the storages are followed); a label given once is kept
    (``temporaries`` are relabelled; gradient shards are labelled over their reduce-scatter buffer at the backward's
    end, by `gradients`).
    """

    def __init__(self, timeline: RankTimeline) -> None:
        self.timeline = timeline
        self.rules: dict[Any, Callable[[tuple, dict[str, Any], Any], None]] = {}
        for name, rule in ((("fsdp", "all_gather_copy_in"), self._all_gather_copy_in),
                           (("fsdp", "split_with_sizes_copy"), self._copy_out),
                           (("fsdp", "chunk_cat"), self._chunk_cat),
                           (("c10d", "_allgather_base_"), self._all_gather),
                           (("c10d", "_reduce_scatter_base_"), self._reduce_scatter)):
            op = operator(*name)
            if op is not None:
                self.rules[op] = rule

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        rule = self.rules.get(func)
        if rule is not None:
            rule(args, kwargs, out)
        for value in args:
            if isinstance(value, nn.Parameter):  # a parameter in use: FSDP's unsharded one (shards are adopted)
                self.claim(value, UNSHARDED_PARAMETERS)

    def claim(self, tensor: torch.Tensor, category: str) -> None:
        """Label ``tensor``'s storage unless something labelled it already."""
        record = self.timeline.followed(tensor)
        if record is not None and record.category == CREATED:
            record.category = category

    def _all_gather_copy_in(self, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        self.claim(out[1], ALL_GATHER_BUFFERS)

    def _copy_out(self, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        for tensor in tensors_in(kwargs.get("out")):
            self.claim(tensor, UNSHARDED_PARAMETERS)

    def _chunk_cat(self, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        for tensor in tensors_in(args[0]):
            self.claim(tensor, UNSHARDED_GRADIENTS)
        self.claim(kwargs["out"], REDUCE_SCATTER_BUFFERS)

    def _all_gather(self, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        self.claim(args[0], ALL_GATHER_BUFFERS)

    def _reduce_scatter(self, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        self.claim(args[0], REDUCE_SCATTER_BUFFERS)
        self.claim(args[1], REDUCE_SCATTER_BUFFERS)

    def gradients(self, parameters: list[nn.Parameter]) -> None:
        """The backward ended: the gradients it left on the sharded parameters are the gradient shards."""
        for parameter in parameters:
            if parameter.grad is not None:
                self.timeline.label(parameter.grad, GRADIENT_SHARDS)

    def saving(self) -> Any:
        """The context in which autograd's saved tensors are noted: a storage the step created, saved, and not
        labelled otherwise is a saved activation."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self.claim(tensor, SAVED)
        return tensor


def operator(namespace: str, name: str) -> Any:
    """``torch.ops.<namespace>.<name>.default``, or None where this torch build has no such operator."""
    try:
        return getattr(getattr(torch.ops, namespace), name).default
    except (AttributeError, RuntimeError):
        return None


def live_by_category(live: dict[str, int]) -> dict[str, int]:
    """A timeline's live bytes in the rank's categories: ``created`` is ``temporaries``, and anything that existed
    before the step without a label of its own joins the buffers (FSDP2's and the model's persistent tensors)."""
    merged = {category: 0 for category in CATEGORIES}
    for category, value in live.items():
        target = TEMPORARIES if category == CREATED else BUFFERS if category == PRE_EXISTING else category
        merged[target] = merged.get(target, 0) + value
    return merged
