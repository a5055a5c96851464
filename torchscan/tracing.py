"""The module-call tracer: the only global hooks and the only stack of open calls; it builds one record per call and
publishes every call's opening and closing to the features that subscribe.

Pre-hooks open a `Frame`; post-hooks close it, estimate the call with operator counting paused, attribute
operator FLOPs directly and inclusively, and release every reference to the call's objects. Features (memory,
training-step attribution, recomputation) are `CallSubscriber` objects: the tracer tells each, in the order they
subscribed, after its own work on the call, so no feature depends on another's hooks. Operators reach features
through the operator recorder, which knows the open call from this stack.

Speculative ownership: while a caller registration matches some module of the model, a registered descendant may
still open a built-in inclusive owner (a native Transformer layer). The descendants' outcomes then wait in the owner
frame's ``pending`` list until no undecided owner encloses them, and lose the fields an owner whose formula applied
covers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from threading import get_ident
from typing import Any, NamedTuple, Protocol

import torch
from torch import nn
from torch.nn.modules.module import (
    _global_forward_hooks_with_kwargs,
    register_module_forward_hook,
    register_module_forward_pre_hook,
)

from .diagnostics import Diagnostic
from .direct_work import DirectWork, ObservedWork
from .estimate_memo import EstimateMemo
from .estimation import (
    CallContext,
    CallEstimate,
    delegated_estimate,
    estimate_call,
    forward_error,
    plain_container,
)
from .handlers import METRIC_FIELDS, ModuleCall, ModuleHandler
from .module_facts import BuiltinLookup, ModuleInfo, model_facts
from .operators import OperatorRecorder, OperatorScope
from .records import CallOutcome, CallParts
from .results import SUMMABLE_METRICS
from .values import FAILED_OUTPUT, call_metadata, describe

NO_FIELDS: frozenset[str] = frozenset()
SUMMABLE = frozenset(SUMMABLE_METRICS)


class Finished(NamedTuple):
    """A call that returned, as the post-hook saw it: a `ModuleCall` only when an estimate needs one."""

    module: nn.Module
    args: tuple
    kwargs: dict[str, Any]
    output: Any


class CallSubscriber(Protocol):
    """A feature that follows the model's layer calls through the tracer (memory, graph claims, recomputation)."""

    def call_opened(self, frame: Frame) -> None:
        """The tracer opened ``frame`` (it is on top of the stack)."""

    def call_closed(self, frame: Frame, call: Finished | None) -> None:
        """The tracer closed ``frame`` (popped, its parts filled): ``call`` is None when the call raised."""


class Frame:
    """One open module call: in ``mode="structure"`` only its module, parts and positional arguments (`open`
    adds the state of a full analysis, with the operator scope the recorder counts the call's operators into). A
    call re-run after the forward (`CallTracer.replaying`) has no parts."""

    __slots__ = ("args", "covered", "expanded", "index", "info", "module_id", "needed", "opened_by", "operators",
                 "overlay", "owned_maybe", "owned_sure", "parts", "pending")
    operators: OperatorScope  # set by the tracer when a full analysis opens the call

    def __init__(self, module_id: int, info: ModuleInfo, parts: CallParts | None, args: tuple) -> None:
        self.module_id = module_id
        self.info = info
        self.parts = parts
        self.args = args  # the positional arguments the pre-hook saw (described again only if a hook replaced them)

    def open(self, index: int, parent: Frame | None) -> None:
        """The state of a full analysis: coverage inherited from owning ancestors, operator counts, overlay."""
        self.index = index
        self.covered = covered = _inherited_coverage(parent)  # field -> the owning ancestor's owner_reference()
        self.needed = METRIC_FIELDS if not covered else frozenset(METRIC_FIELDS - covered.keys())  # to estimate
        self.owned_sure: frozenset[str] = NO_FIELDS
        self.owned_maybe: frozenset[str] = NO_FIELDS
        self.expanded = False
        self.opened_by: str | None = None
        self.pending: list[CallOutcome] | None = None  # a list while this call's ownership is undecided
        # the innermost enclosing frame whose ownership is undecided: where this call's outcome waits
        self.overlay: Frame | None = None if parent is None else (
            parent if parent.pending is not None else parent.overlay)

    def owner_reference(self) -> dict[str, Any]:
        """The call's `CallParts.reference`: its children's ``parent``, its covered descendants' owner."""
        return self.parts.reference()  # type: ignore[union-attr]  # every frame that owns or parents has parts


def open_call(stack: list[Frame]) -> dict[str, Any] | None:
    """The innermost open call that has a record, as ``{"path", "call_index"}``; None outside every recorded call
    (a call re-run after the forward has no record)."""
    return stack[-1].parts.reference() if stack and stack[-1].parts is not None else None


def _inherited_coverage(parent: Frame | None) -> dict[str, dict[str, Any]]:
    if parent is None:
        return {}
    if not parent.owned_sure:
        return parent.covered
    covered = dict(parent.covered)
    owner = parent.owner_reference()
    for name in parent.owned_sure:
        covered.setdefault(name, owner)
    return covered


def _keep_the_decomposed_path(module: nn.Module, args: tuple) -> None:
    """A module hook that does nothing; its presence makes PyTorch run the observable decomposed path."""


class CallTracer:
    """Hooks every module of ``model``; with a ``recorder`` it also estimates and attributes operator FLOPs."""

    def __init__(self, model: nn.Module, custom_modules: dict[type, ModuleHandler],
                 recorder: OperatorRecorder | None, builtin: BuiltinLookup | None) -> None:
        self.full = recorder is not None
        self.facts = model_facts(model, custom_modules if self.full else {}, builtin if self.full else None)
        self.infos = self.facts.infos
        self.calls: list[CallParts] = []  # every recorded call, in call-start order
        self.diagnostics: list[Diagnostic] = []
        self.stack: list[Frame] = []
        self.handles: list[Any] = []
        self.subscribers: list[CallSubscriber] = []
        self.recording = True  # False after the forward: calls re-run in the backward are published, not recorded
        self.thread = get_ident()
        self.foreign_thread_calls = 0  # module calls made from other threads: invisible to the dispatch mode
        self.speculative = self.full and any(info.caller is not None for info in self.infos.values())
        self.memo = EstimateMemo()
        #: The innermost recorded call whose forward raised, while the error propagates (a call that returns after it
        #: clears it: the error was handled); what a note on the forward's error names (`torchscan.calls.errors`).
        self.failed: CallParts | None = None
        if recorder is not None:  # the recorder of a full analysis, the only kind that estimates and counts
            self.counting: OperatorRecorder = recorder

    def attach(self) -> None:
        """One global pair of forward hooks, filtered to this model's modules (two handles, however large the model:
        per-module handles cost more to attach than a small model's whole forward)."""
        self.handles += [register_module_forward_pre_hook(self._pre_hook),
                         register_module_forward_hook(self._post_hook, with_kwargs=True, always_call=True)]
        for module in self.facts.fused_path_owners:  # PyTorch keeps the decomposed path while a module hook is on
            self.handles.append(module.register_forward_pre_hook(_keep_the_decomposed_path))

    def detach(self) -> None:
        """Remove every hook, leaving PyTorch's global hook tables as they were found."""
        for handle in self.handles:
            handle.remove()
            # PyTorch's handle of a global forward hook registered with ``with_kwargs=True`` removes the hook and its
            # ``always_call`` flag but not its ``with_kwargs`` flag: one entry would remain per analysis.
            _global_forward_hooks_with_kwargs.pop(handle.id, None)
        self.handles.clear()

    @contextmanager
    def subscribed(self, subscriber: CallSubscriber) -> Iterator[None]:
        """``subscriber`` hears of every call opened and closed inside the block."""
        self.subscribers.append(subscriber)
        try:
            yield
        finally:
            self.subscribers.remove(subscriber)

    @contextmanager
    def replaying(self) -> Iterator[None]:
        """Attached again after the forward, without recording: the model's calls that run inside the block (a
        checkpointed forward recomputed by the backward, in whichever thread autograd runs it) are published to
        the subscribers with frames that have no parts."""
        self.recording = False
        self.attach()
        try:
            yield
        finally:
            self.detach()
            self.recording = True

    # -- hooks -------------------------------------------------------------------------------------------------

    def _pre_hook(self, module: nn.Module, args: tuple) -> None:
        """Open a frame. Global pre-hooks receive no keyword arguments: the post-hook describes them."""
        info = self.infos.get(id(module))
        if info is None:
            return  # not a module of this model
        stack = self.stack
        if not self.recording:  # a call re-run after the forward: published, not recorded
            frame = Frame(id(module), info, None, args)
        elif get_ident() != self.thread:
            self.foreign_thread_calls += 1
            return
        else:
            parent = stack[-1] if stack else None
            call_index = info.calls
            info.calls = call_index + 1
            parts = CallParts(info.path, call_index, info.name, len(stack), info.type_name, info.leaf,
                              None if parent is None else parent.parts, call_metadata(args, {}))
            frame = Frame(id(module), info, parts, args)
            if self.full:
                self._open_estimates(frame, parent)
            self.calls.append(parts)
        stack.append(frame)
        if self.subscribers:
            for subscriber in self.subscribers:
                subscriber.call_opened(frame)

    def _open_estimates(self, frame: Frame, parent: Frame | None) -> None:
        """A full analysis's side of opening a call: ownership, what the module view must observe, operator scope."""
        frame.open(len(self.calls), parent)
        info, covered = frame.info, frame.covered.keys()
        if info.may_own:
            self._open_ownership(frame)
        if info.observes and not covered >= METRIC_FIELDS:  # a third-party formula, checked against what ran
            frame.operators = OperatorScope(ObservedWork())
        elif info.prices_direct_work and not covered >= SUMMABLE:  # the module view prices its direct operators
            frame.operators = OperatorScope(DirectWork())
        else:
            frame.operators = OperatorScope()
        self.counting.enter(frame.operators)

    def _post_hook(self, module: nn.Module, args: tuple, *rest: Any) -> None:
        """Close the frame: ``rest`` is ``(kwargs, output)``, or ``(output,)`` exactly when the call failed (its
        forward, or a hook before it, raised). PyTorch calls always-called global hooks from its error path without
        the keyword arguments, and global pre-hooks never receive them: a failed call's keyword arguments are not
        described (docs/schema.md says so)."""
        stack = self.stack
        if not stack or stack[-1].module_id != id(module) or (self.recording and get_ident() != self.thread):
            return  # not a module of this model, or another thread's call
        frame = stack.pop()
        call = Finished(module, args, *rest) if len(rest) == 2 else None
        if frame.parts is not None:  # else a call re-run after the forward, which is not recorded
            self._close(frame, frame.parts, call, rest[-1])
        if self.subscribers:
            for subscriber in self.subscribers:
                subscriber.call_closed(frame, call)

    def _close(self, frame: Frame, parts: CallParts, call: Finished | None, output: Any) -> None:
        """Note what the post-hook saw in the call's parts and close its estimates."""
        if call is not None and call.args is not frame.args:  # a caller's pre-hook replaced them
            parts.input["args"] = call_metadata(call.args, {})["args"]
        if call is not None and call.kwargs:
            parts.input["kwargs"] = call_metadata((), call.kwargs)["kwargs"]
        parts.output = dict(FAILED_OUTPUT) if call is None else describe(output)
        if call is not None:
            self.failed = None
        elif self.failed is None:  # the innermost call that raised closes first
            self.failed = parts
        if self.full:
            self._close_estimates(frame, parts.call_index, call)
        elif call is None:
            self.diagnostics.append(forward_error(frame.info.type_name, frame.info.path, parts.call_index))

    def _close_estimates(self, frame: Frame, call_index: int, call: Finished | None) -> None:
        """Estimate the closed call (``call`` is None when its forward raised), and write it, or settle it when an
        undecided owner is inside or around it."""
        self.counting.leave()
        estimate, shared = self._estimate(frame, call_index, call)
        # dicts of this call's own: an enclosing owner may still take over fields in it
        owners = {name: dict(owner) for name, owner in sorted(frame.covered.items())} if frame.covered else {}
        frame.operators.close(self.stack[-1].operators if self.stack else None)
        outcome = CallOutcome(frame.index, estimate, owners, frame.operators, shared)
        if frame.pending is None and frame.overlay is None:  # the common case
            self._settled(outcome)
        else:
            self._settle(frame, outcome)

    # -- ownership ---------------------------------------------------------------------------------------------

    def _open_ownership(self, frame: Frame) -> None:
        """Which fields this call will own for its descendants: surely (a caller's handler, or a built-in one when
        nothing is speculative: descendants then skip those fields), or pending its own estimate."""
        info = frame.info
        free = METRIC_FIELDS - frame.covered.keys()
        if info.caller is not None:
            self._open_builtin_owners(info.type_name)
            frame.owned_sure = info.caller.subtree_metrics & free
            if info.builtin is not None:
                frame.owned_maybe = (info.builtin.subtree_metrics & free) - frame.owned_sure
        elif info.builtin is not None:
            if self.speculative:
                frame.owned_maybe = info.builtin.subtree_metrics & free
            else:
                frame.owned_sure = info.builtin.subtree_metrics & free
        if frame.owned_maybe:
            frame.pending = []

    def _open_builtin_owners(self, opener: str) -> None:
        """A caller-registered call opens every enclosing built-in inclusive owner that no caller registered."""
        for ancestor in self.stack:
            if ancestor.owned_maybe and ancestor.info.caller is None and not ancestor.expanded:
                ancestor.expanded = True
                ancestor.opened_by = opener

    def _settle(self, frame: Frame, outcome: CallOutcome) -> None:
        """Resolve the overlay of a closing frame, then write the outcomes or hand them to an undecided owner."""
        settled = [outcome]
        if frame.pending is not None:
            covering = frame.owned_maybe & outcome.estimate.builtin_owned if outcome.estimate else NO_FIELDS
            if covering:
                owner = frame.owner_reference()
                for waiting in frame.pending:
                    waiting.cover(covering, owner)
            settled = [*frame.pending, outcome]
            frame.pending = None
        if frame.overlay is not None:
            frame.overlay.pending.extend(settled)  # type: ignore[union-attr]
            return
        for waiting in settled:
            self._settled(waiting)

    def _settled(self, outcome: CallOutcome) -> None:
        """A call's final outcome: kept in its parts for the record, its diagnostics in the report's."""
        self.calls[outcome.index].outcome = outcome
        if outcome.estimate:
            self.diagnostics.extend(outcome.estimate.diagnostics)

    # -- estimation and operators --------------------------------------------------------------------------------

    def _estimate(self, frame: Frame, call_index: int, call: Finished | None) -> tuple[CallEstimate | None, bool]:
        """The call's estimate, and whether it is the memo's own (shared until its record copies it)."""
        info, needed = frame.info, frame.needed
        direct, frame.operators.direct_work = frame.operators.direct_work, None  # released with the call's objects
        if not needed:
            return None, False
        if call is not None and plain_container(info.caller, info.builtin, info.leaf, direct):
            return delegated_estimate(needed), False
        # the first part of the memo's key, for a call that only a memoizing built-in formula estimates
        structure = (None if call is None or not info.memoizes or frame.expanded
                     else self.memo.structure(info.builtin, needed, *call))
        stored = None if structure is None else self.memo.replay(structure, call.module)  # type: ignore[union-attr]
        if stored is not None:
            return self._replayed(frame, stored, call_index)
        context = CallContext(path=info.path, call_index=call_index, type_name=info.type_name,
                              leaf=info.leaf, caller=info.caller, builtin=info.builtin, needed=needed,
                              expanded=frame.expanded, direct=direct, opened_by=frame.opened_by)
        estimate = self._computed(context, None if call is None else ModuleCall(*call))
        if structure is not None:  # an outcome that waits in an overlay may be covered (edited) later
            self.memo.store(structure, call.module, estimate, copy=frame.overlay is not None)  # type: ignore[union-attr]
        return estimate, False

    @staticmethod
    def _replayed(frame: Frame, stored: CallEstimate, call_index: int) -> tuple[CallEstimate, bool]:
        """A memoized estimate for this call: the memo's own object, shared until the record copies it, unless the
        outcome waits in an overlay (an owner may still cover, that is edit, it) or has diagnostics to re-address."""
        if frame.overlay is None and not stored.diagnostics:
            return stored, True
        return stored.copy({"path": frame.info.path, "call_index": call_index}), False

    def _computed(self, context: CallContext, call: ModuleCall | None) -> CallEstimate:
        """A new estimate, with operator counting paused: handlers may run tensor operations, which are not the
        model's work. (Memo keys and replays read only tensor metadata, which dispatches nothing.)"""
        with self.counting.paused():
            if torch.is_grad_enabled():  # the model's forward enabled it; the analysis runs under no_grad
                with torch.no_grad():
                    return estimate_call(context, call)
            return estimate_call(context, call)
