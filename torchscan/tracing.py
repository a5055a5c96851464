"""The module-call tracer: forward hooks that build one record per call and keep the call stack.

Pre-hooks open a `Frame` (record, operator scope, metric coverage inherited from owning ancestors);
post-hooks close it, run the estimates immediately with operator counting suspended, attribute operator FLOPs
directly and inclusively, and release every reference to the call's objects.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from .breakdown import without_metrics
from .diagnostics import Diagnostic
from .direct_work import DirectWork
from .estimation import CallContext, estimate_call, forward_error
from .formulas import DEFAULT_HANDLERS
from .handlers import METRIC_FIELDS, ModuleCall, ModuleHandler, builtin_handler, closest_handler
from .inputs import FAILED_OUTPUT, call_metadata, value_metadata
from .operators import OperatorRecorder, OperatorScope
from .results import METRIC_UNITS, complete, is_incomplete, not_requested, partial, plain_number

NO_FIELDS: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ModuleInfo:
    """Per-module facts computed once before the forward, so the hooks stay cheap."""

    path: str
    type_name: str
    leaf: bool
    caller: ModuleHandler | None
    builtin: ModuleHandler | None


class Frame:
    """One open module call."""

    __slots__ = ("module_id", "info", "record", "index", "covered", "owned_sure", "owned_maybe", "expanded",
                 "opened_by", "scope", "inclusive_flops", "inclusive_uncounted", "exception_before")

    def __init__(self, module_id: int, info: ModuleInfo, record: dict[str, Any], index: int,
                 covered: dict[str, int]) -> None:
        self.module_id = module_id
        self.info = info
        self.record = record
        self.index = index
        self.covered = covered  # field -> index of the owning ancestor's record
        self.owned_sure: frozenset[str] = NO_FIELDS
        self.owned_maybe: frozenset[str] = NO_FIELDS
        self.expanded = False
        self.opened_by: str | None = None
        self.scope = OperatorScope()
        self.inclusive_flops = 0
        self.inclusive_uncounted = False
        self.exception_before = sys.exc_info()[1]


class CallTracer:
    """Hooks every module of ``model``; with a ``recorder`` it also estimates and attributes operator FLOPs."""

    def __init__(self, model: nn.Module, custom_modules: dict[type, ModuleHandler],
                 recorder: OperatorRecorder | None) -> None:
        self.model = model
        self.custom_modules = custom_modules
        self.recorder = recorder
        self.full = recorder is not None
        self.infos = module_infos(model, custom_modules if self.full else {}, DEFAULT_HANDLERS if self.full else {})
        self.records: list[dict[str, Any]] = []
        self.diagnostics: list[tuple[int, Diagnostic]] = []  # (record index, diagnostic)
        self.stack: list[Frame] = []
        self.call_counts: dict[int, int] = {}
        self.totals_scope = OperatorScope()
        self.handles: list[Any] = []
        self.thread = threading.get_ident()
        self.foreign_thread_calls = 0  # module calls made from other threads: invisible to the dispatch mode
        self.speculative = self.full and any(info.caller is not None for info in self.infos.values())

    def attach(self) -> None:
        for module in self.model.modules():
            self.handles.append(module.register_forward_pre_hook(self._pre_hook, with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post_hook, with_kwargs=True, always_call=True))

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    # -- hooks -------------------------------------------------------------------------------------------------

    def _pre_hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if threading.get_ident() != self.thread:
            self.foreign_thread_calls += 1
            return
        info = self.infos[id(module)]
        call_index = self.call_counts.get(id(module), 0)
        self.call_counts[id(module)] = call_index + 1
        parent = self.stack[-1] if self.stack else None
        record = {
            "path": info.path, "call_index": call_index, "name": info.path.rpartition(".")[2],
            "depth": len(self.stack), "type": info.type_name, "leaf": info.leaf,
            "parent": None if parent is None else {"path": parent.record["path"],
                                                   "call_index": parent.record["call_index"]},
            "input": call_metadata(args, kwargs), "output": None,
            "parameters": None, "buffers": None,  # filled after the forward, once lazy modules have materialized
        }
        frame = Frame(id(module), info, record, len(self.records), self._inherited_coverage(parent))
        self.records.append(record)
        if self.full:
            self._open_ownership(frame)
            if not SUMMABLE <= frame.covered.keys() and (info.caller is not None or info.builtin is None):
                frame.scope.direct_work = DirectWork()
            self.recorder.scopes.append(frame.scope)
        self.stack.append(frame)

    def _post_hook(self, module: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if threading.get_ident() != self.thread or not self.stack or self.stack[-1].module_id != id(module):
            return  # another thread's call, or an earlier pre-hook (not ours) raised and no frame was opened
        frame = self.stack.pop()
        failed = sys.exc_info()[1] is not None and sys.exc_info()[1] is not frame.exception_before
        record = frame.record
        record["output"] = dict(FAILED_OUTPUT) if failed else value_metadata(output)
        if not self.full:
            record["metrics"] = {name: not_requested(unit, "module_call") for name, unit in METRIC_UNITS.items()}
            record["operator_flops"] = {"direct": not_requested("FLOPs", "direct"),
                                        "inclusive": not_requested("FLOPs", "inclusive")}
            if failed:
                self.diagnostics.append((frame.index, forward_error(frame.info.type_name, frame.info.path,
                                                                    record["call_index"])))
            return
        recorder = self.recorder
        recorder.scopes.pop()
        recorder.suspended = True
        try:
            with torch.no_grad():
                self._estimate(frame, None if failed else ModuleCall(module, args, kwargs, output))
        finally:
            recorder.suspended = False
        self._close_operators(frame)

    # -- ownership ---------------------------------------------------------------------------------------------

    def _inherited_coverage(self, parent: Frame | None) -> dict[str, int]:
        if parent is None:
            return {}
        if not parent.owned_sure:
            return parent.covered
        covered = dict(parent.covered)
        for name in parent.owned_sure:
            covered.setdefault(name, parent.index)
        return covered

    def _open_ownership(self, frame: Frame) -> None:
        """Which fields this call will own for its descendants: surely (caller) or pending its own estimate.

        A built-in inclusive formula is only pending when a caller registration matches some module of this model:
        a registered descendant may then still open it (expanded_atomic_boundary), and every descendant estimate
        must exist. Otherwise it is sure, and descendants skip the fields it owns before they execute.
        """
        info = frame.info
        if info.caller is not None:
            self._open_builtin_owners(info.type_name)
        free = METRIC_FIELDS - frame.covered.keys()
        if info.caller is not None:
            frame.owned_sure = info.caller.subtree_metrics & free
            if info.builtin is not None:
                frame.owned_maybe = (info.builtin.subtree_metrics & free) - frame.owned_sure
        elif info.builtin is not None:
            if self.speculative:
                frame.owned_maybe = info.builtin.subtree_metrics & free
            else:
                frame.owned_sure = info.builtin.subtree_metrics & free

    def _open_builtin_owners(self, opener: str) -> None:
        """A caller-registered call opens every enclosing built-in inclusive owner that no caller registered."""
        for ancestor in self.stack:
            if ancestor.owned_maybe and ancestor.info.caller is None and not ancestor.expanded:
                ancestor.expanded = True
                ancestor.opened_by = opener

    # -- estimation ----------------------------------------------------------------------------------------------

    def _estimate(self, frame: Frame, call: ModuleCall | None) -> None:
        info, record = frame.info, frame.record
        needed = METRIC_FIELDS - frame.covered.keys()
        owners = {name: {"path": self.records[index]["path"], "call_index": self.records[index]["call_index"]}
                  for name, index in sorted(frame.covered.items())}
        context = CallContext(info.path, record["call_index"], info.type_name, info.leaf,
                              info.caller, info.builtin, frozenset(needed), frame.expanded, frame.scope.direct_work,
                              frame.opened_by)
        estimate = estimate_call(context, call) if needed else None
        frame.scope.direct_work = None
        record["metrics"] = estimate.metrics if estimate else {}
        if estimate and estimate.ownership:
            record["metric_ownership"] = dict(sorted(estimate.ownership.items()))
        if owners:
            record["metric_owners"] = owners
        if estimate and estimate.delegated:
            record["delegated_metrics"] = estimate.delegated
        keep_breakdown(record, estimate)
        if estimate:
            self.diagnostics.extend((frame.index, item) for item in estimate.diagnostics)
            covering = estimate.builtin_owned & frame.owned_maybe
            if covering:
                self._cover_descendants(frame, covering)

    def _cover_descendants(self, frame: Frame, fields: set[str]) -> None:
        """A built-in inclusive fallback replaces the descendant estimates that ran speculatively."""
        owner = {"path": frame.record["path"], "call_index": frame.record["call_index"]}
        first = frame.index + 1
        for record in self.records[first:]:
            for name in sorted(fields):
                if name in record["metrics"]:
                    del record["metrics"][name]
                    record.get("metric_ownership", {}).pop(name, None)
                elif name in record.get("delegated_metrics", ()):
                    record["delegated_metrics"].remove(name)
                elif name not in record.get("metric_owners", {}):
                    continue
                record.setdefault("metric_owners", {})[name] = owner  # the outermost owner, as without speculation
            # The parts of estimates the owner now counts go with them.
            record["breakdown"] = without_metrics(record.get("breakdown", []), fields)
            for key in ("metric_ownership", "delegated_metrics", "breakdown"):
                if key in record and not record[key]:
                    del record[key]
            if "metric_owners" in record:
                record["metric_owners"] = dict(sorted(record["metric_owners"].items()))
        self.diagnostics = [(index, item) for index, item in self.diagnostics
                            if index < first or not self._superseded(item, self.records[index], fields)]

    @staticmethod
    def _superseded(item: Diagnostic, record: dict[str, Any], fields: set[str]) -> bool:
        """A descendant's diagnostic about estimates that an owner's inclusive formula replaced."""
        if item.get("metric") in fields:
            return True
        return item["code"] == "unsupported_module" and not any(
            is_incomplete(result) for result in record["metrics"].values())

    # -- operators -----------------------------------------------------------------------------------------------

    def _close_operators(self, frame: Frame) -> None:
        scope = frame.scope
        frame.inclusive_flops += scope.flops
        uncounted = frame.inclusive_uncounted or bool(scope.uncounted)
        frame.record["operator_flops"] = {
            "direct": scope.result("direct"),
            "inclusive": (partial if uncounted else complete)(plain_number(frame.inclusive_flops), "FLOPs",
                                                              "inclusive", "operator_dispatch"),
        }
        if self.stack:
            parent = self.stack[-1]
            parent.inclusive_flops += frame.inclusive_flops
            parent.inclusive_uncounted = parent.inclusive_uncounted or uncounted
        self.totals_scope.merge(scope)


SUMMABLE = frozenset({"module_flops", "macs", "dmas"})


def keep_breakdown(record: dict[str, Any], estimate: Any) -> None:
    """The parts of the call's estimate, beside it in the record (torchscan.breakdown), when its handler gave some."""
    if estimate is not None and estimate.breakdown:
        record["breakdown"] = estimate.breakdown


def module_infos(model: nn.Module, custom: dict[type, ModuleHandler], builtins: dict[type, ModuleHandler]
                 ) -> dict[int, ModuleInfo]:
    """Path, type and handlers of every module, looked up once per type."""
    handler_cache: dict[type, tuple[ModuleHandler | None, ModuleHandler | None]] = {}
    infos: dict[int, ModuleInfo] = {}
    for path, module in model.named_modules():
        kind = type(module)
        if kind not in handler_cache:
            handler_cache[kind] = (closest_handler(kind, custom), builtin_handler(kind, builtins))
        caller, builtin = handler_cache[kind]
        infos[id(module)] = ModuleInfo(path=path, type_name=f"{kind.__module__}.{kind.__qualname__}",
                                       leaf=next(module.children(), None) is None, caller=caller, builtin=builtin)
    return infos


def tensor_statistics(model: nn.Module) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """Parameter and buffer statistics of each module path; a tensor shared by several modules counts once.

    Uninitialized lazy parameters (a lazy module that never ran) have no size yet and are not counted.
    """
    seen: set[int] = set()
    return {path: (_tensor_stats(module._parameters.values(), seen, with_grad=True),
                   _tensor_stats(module._buffers.values(), seen, with_grad=False))
            for path, module in model.named_modules()}


def _tensor_stats(tensors: Any, seen: set[int], with_grad: bool) -> dict[str, int]:
    count = trainable = nbytes = 0
    for tensor in tensors:
        if tensor is None or id(tensor) in seen or is_lazy(tensor):
            continue
        seen.add(id(tensor))
        count += tensor.numel()
        nbytes += tensor.numel() * tensor.element_size()
        if with_grad and tensor.requires_grad:
            trainable += tensor.numel()
    stats = {"count": count, "bytes": nbytes}
    if with_grad:
        stats.update(trainable=trainable, frozen=count - trainable)
    return stats
