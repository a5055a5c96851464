"""A KV cache the forward's output holds: its tensors stay alive as long as the output does, so they are part of the
forward's peak. A ``transformers`` model returns its cache (``past_key_values``, ``cache``) in its output by
default, which is why its forward peak can be several times that of the same network without one; the memory
section says so (``memory.output_cache``) beside the peak.

Caches are recognized by class name (a class named ``Cache`` of a ``transformers`` module in the MRO), without
importing ``transformers``; they are found with `torchscan.values.objects_in`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..results import MODEL, MetricResult, complete
from ..values import objects_in, tensors_in
from .timeline import METHOD, MemoryTimeline, StorageRecord


def is_cache(value: Any) -> bool:
    """Whether ``value`` is a ``transformers`` cache (``DynamicCache``, ``StaticCache``, ``EncoderDecoderCache``…)."""
    return any(klass.__name__ == "Cache" and klass.__module__.startswith("transformers")
               for klass in type(value).__mro__)


def cache_tensors(caches: Sequence[Any]) -> list[torch.Tensor]:
    """The tensors the caches hold: the attributes of their layers (keys, values, any state), or of the cache itself
    when it has no layers; a cache made of caches (encoder-decoder) gives theirs."""
    holders = [*caches, *(inner for cache in caches for inner in objects_in(list(vars(cache).values()), is_cache))]
    layers = [layer for holder in holders for layer in getattr(holder, "layers", None) or [holder]]
    return tensors_in([vars(layer) for layer in layers if hasattr(layer, "__dict__")])


@dataclass(frozen=True)
class OutputCache:
    """The caches an output holds: their classes, storage bytes (each storage once) and their timeline records."""

    classes: tuple[str, ...]
    nbytes: int
    records: tuple[StorageRecord, ...]

    def field(self, peak_index: int | None) -> dict[str, Any]:
        """The memory section's ``output_cache``: every byte the caches hold when the forward returned, and those
        the forward created that are live at its peak (part of ``peak_above_start``)."""
        at = -1 if peak_index is None else peak_index
        at_peak = sum(record.nbytes for record in self.records if not record.pre_existing and record.live_after(at))
        return {"cache_class": ", ".join(self.classes), "bytes": _bytes(self.nbytes), "at_peak": _bytes(at_peak)}


def output_cache(output: Any, timeline: MemoryTimeline) -> OutputCache | None:
    """The caches ``output`` holds, or None when it holds none."""
    caches = objects_in(output, is_cache)
    if not caches:
        return None
    tensors = cache_tensors(caches)
    storages = {id(storage): storage for storage in (tensor.untyped_storage() for tensor in tensors)}
    records = {id(record): record for record in map(timeline.followed, tensors) if record is not None}
    return OutputCache(tuple(dict.fromkeys(type(cache).__name__ for cache in caches)),
                       sum(storage.nbytes() for storage in storages.values()), tuple(records.values()))


def _bytes(value: int) -> MetricResult:
    return complete(value, "bytes", MODEL, METHOD)
