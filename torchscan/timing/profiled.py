"""Measured time per layer call: ``crawl_module(..., time=True)`` and ``crawl_training_step(..., time=True)``.

The counting analysis never runs under a clock. After it, the model runs again on its own device, twice over:

1. a **plain run** (nothing attached) timed by `torchscan.timing.measured.time_runs`: the measured total;
2. a **profiled run** under PyTorch's profiler (``torch.profiler``), with the tracer attached (`CallTracer`, in
   structure mode: no estimates, no operator counting) and `CallRanges` subscribed to it, which opens one
   ``record_function`` range per layer call. Every operator that the run dispatches at the top level (not inside
   another operator) is filed under the innermost layer call whose range encloses it, with its *kernel time*: the
   operator's duration on the CPU, or the device time of the kernels it launched on an accelerator. A call's
   ``self`` time is what was filed under it; ``inclusive`` adds its descendants'. Operators outside every call
   form their own line. The hooks' and ranges' own Python work runs between operators, so it is never in a time.

A training step's profiled run adds ranges for the loss, the backward and the optimizer step. A backward operator
belongs to the layer call whose forward created its autograd node: the profiler gives each forward operator and each
backward node the same *sequence number*, so the node's time (``autograd::engine::evaluate_function: ...``) goes to
the call in whose range its forward operator ran; the loss's nodes to ``loss_backward``; the rest (the seed
gradient, ``AccumulateGrad``, gradient sums) to ``engine``; the operators of layer calls recomputed during the
backward (activation checkpointing) to ``recomputation``.

The two runs alternate, one plain iteration then one profiled iteration (a profiler session of its own), so that
a load that comes and goes hits both alike. Each profiled iteration is attributed on its own; the section reports,
per call and per line, the median over iterations with its quartiles and extremes. Models on ``meta`` or on fake-tensor stand-ins run no
kernels: ``time=True`` raises ``ValueError`` for them before anything runs. docs/time-measured.md says all this for
readers.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field, replace
from functools import cache, partial
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.autograd.profiler import record_function

from ..tracing import CallTracer, Finished, Frame
from ..values import tensors_in
from .measured import check_counts, describe_device, spread, synchronize, time_runs, timed_device

if TYPE_CHECKING:
    from ..crawler import Analysis

VERSION = 1
METHOD = "profiler_kernel_time"
#: The defaults of ``time=True`` (each of the plain and the profiled run: so many warm-up and timed iterations).
WARMUP, REPEATS = 2, 5
PREFIX = "torchscan.time."
ITERATION, CALL, LOSS, BACKWARD, OPTIMIZER, RECOMPUTATION = (
    f"{PREFIX}{name}" for name in ("iteration:", "call:", "loss", "backward", "optimizer", "recomputation"))
#: The lines of time outside the layer calls' forward, in report order (a forward has the first only).
FORWARD_LINES = ("outside_layer_calls",)
STEP_LINES = ("outside_layer_calls", "loss_forward", "loss_backward", "engine", "recomputation", "optimizer")
#: The phase of each operator row.
PHASES = ("forward", "loss_forward", "backward", "optimizer")
_BACKWARD_SCOPE = 1  # at::RecordScope::BACKWARD_FUNCTION: an autograd node's own range
_EVALUATE = "autograd::engine::evaluate_function"
_TIME_KEYS = frozenset({"warmup", "repeats"})
CPU = torch.device("cpu")


@dataclass(frozen=True)
class TimeRequest:
    """``time=True`` (or ``time={"warmup": ..., "repeats": ...}``), checked; `on` adds the device it will run on."""

    warmup: int = WARMUP
    repeats: int = REPEATS
    device: torch.device = CPU

    def on(self, model: nn.Module, args: Any, kwargs: Any, stand_ins: torch.device | None) -> TimeRequest:
        """This request on the one real device the model and its call run on (`timed_device_of`)."""
        return replace(self, device=timed_device_of(model, args, kwargs, stand_ins))


def time_request(time: Any) -> TimeRequest | None:
    """The ``time`` argument of an entry point checked (errors name it): ``False`` (None), ``True`` (the defaults) or
    a mapping with ``warmup`` and/or ``repeats``."""
    if isinstance(time, bool):
        return TimeRequest() if time else None
    if not isinstance(time, Mapping):
        raise TypeError(f"time must be a bool or a mapping with 'warmup' and/or 'repeats', got {type(time).__name__}")
    unknown = sorted(set(time) - _TIME_KEYS)
    if unknown:
        raise ValueError(f"time accepts only 'warmup' and 'repeats', got {', '.join(map(repr, unknown))}")
    request = TimeRequest(**time)
    check_counts(warmup=request.warmup, repeats=request.repeats)
    return request


def timed_device_of(model: nn.Module, args: Any, kwargs: Any, stand_ins: torch.device | None) -> torch.device:
    """The one real device the model and its call run on (an accelerator where any tensor is on one, else the CPU),
    or ``ValueError`` before anything runs: on fake-tensor stand-ins, on ``meta``, or over several accelerators."""
    if stand_ins is not None:
        raise ValueError("time=True needs the model's own kernels: fake-tensor stand-ins (as_device=...) run none; "
                         "measure without as_device, on the device the model is on")
    devices = {tensor.device for tensor in (*model.parameters(), *model.buffers(), *tensors_in(args),
                                            *tensors_in(kwargs))}
    if any(device.type == "meta" for device in devices):
        raise ValueError("time=True needs a model and call on a real device (CPU or an accelerator): on meta nothing "
                         "runs, so there is no time to measure (the bound of a meta model is torchscan.roofline)")
    accelerators = sorted(str(device) for device in devices if device.type != "cpu")
    if len(accelerators) > 1:
        raise ValueError(f"time=True measures one device; the model and its call use {accelerators}")
    target = timed_device(accelerators[0] if accelerators else "cpu", "time")
    if target.type != "cpu" and _activity(target) is None:
        raise ValueError(f"time=True: PyTorch's profiler records no kernels of {target.type} devices, so their "
                         "kernel time cannot be attributed (measure_time still times a workload there)")
    return target


def _activity(device: torch.device) -> Any:
    """The profiler activity that records ``device``'s kernels (None where the profiler has none)."""
    from torch.profiler import ProfilerActivity

    return getattr(ProfilerActivity, device.type.upper(), None)


# -- the ranges: one per layer call, a subscriber of the tracer -----------------------------------------------------


class CallRanges:
    """Opens a profiler range per layer call (subscribed to the tracer) and notes each iteration's calls.

    A call's range is named by its ordinal in the iteration (``torchscan.time.call:<n>``); ``keys[n]`` is its
    ``(path, call_index)`` and ``parents[n]`` the ordinal of the enclosing call (-1 for none). Calls the tracer
    replays in a backward (frames without parts: activation checkpointing) get a ``recomputation`` range.
    """

    def __init__(self) -> None:
        self.iterations: list[tuple[list[tuple[str, int]], list[int]]] = []
        self.keys: list[tuple[str, int]] = []
        self.parents: list[int] = []
        self.counts: dict[str, int] = {}
        self.local = threading.local()  # each thread's open ranges (autograd may replay calls in its own threads)

    def start_iteration(self) -> None:
        """A new iteration's calls are numbered from 0."""
        self.keys, self.parents, self.counts = [], [], {}
        self.iterations.append((self.keys, self.parents))

    def _open(self) -> list[tuple[Any, int]]:
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        return stack

    def call_opened(self, frame: Frame) -> None:
        stack = self._open()
        if frame.parts is None:  # replayed during the backward
            name, ordinal = RECOMPUTATION, -1
        else:
            path = frame.info.path
            call_index = self.counts.get(path, 0)
            self.counts[path] = call_index + 1
            ordinal = len(self.keys)
            self.keys.append((path, call_index))
            self.parents.append(next((n for _, n in reversed(stack) if n >= 0), -1))
            name = f"{CALL}{ordinal}"
        scope = record_function(name)
        scope.__enter__()
        stack.append((scope, ordinal))

    def call_closed(self, frame: Frame, call: Finished | None) -> None:
        stack = self._open()
        if stack:
            scope, _ = stack.pop()
            scope.__exit__(None, None, None)


def alternated(plain: Callable[[], None], traced: Callable[[], None], ranges: CallRanges, request: TimeRequest
               ) -> tuple[list[float], list[IterationTimes]]:
    """The plain run's seconds and the profiled run's attributed iterations, ``request.repeats`` of each, in
    alternation (a load that comes and goes hits both alike), after ``request.warmup`` untimed ones of each. Each
    profiled iteration is a profiler session of its own, so no plain run is ever under the profiler."""
    from torch.profiler import ProfilerActivity, profile

    device = request.device
    for _ in range(request.warmup):
        plain()
        ranges.start_iteration()
        traced()
    ranges.iterations.clear()
    activities = [ProfilerActivity.CPU] + ([] if device.type == "cpu" else [_activity(device)])
    measured: list[float] = []
    times: list[IterationTimes] = []
    for _ in range(request.repeats):
        measured.extend(time_runs(plain, device, 0, 1))
        ranges.start_iteration()
        with profile(activities=activities) as prof:
            with record_function(f"{ITERATION}0"):
                traced()
            synchronize(device)
        times.extend(attribute(list(prof.events()), [len(ranges.keys)], device.type != "cpu"))
    return measured, times


# -- attribution ----------------------------------------------------------------------------------------------------


@dataclass
class IterationTimes:
    """One profiled iteration's kernel time in microseconds: per call (forward and backward), per line, per
    (phase, operator) with its calls."""

    calls: int
    forward: list[float] = field(default_factory=list)
    backward: list[float] = field(default_factory=list)
    lines: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STEP_LINES, 0.0))
    operators: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(lambda: [0, 0.0]))

    def __post_init__(self) -> None:
        self.forward = [0.0] * self.calls
        self.backward = [0.0] * self.calls

    def total(self) -> float:
        return sum(self.forward) + sum(self.backward) + sum(self.lines.values())


@dataclass(frozen=True)
class Context:
    """Where an event ran: the iteration, the phase (forward, loss_forward, backward, optimizer) and, in the
    forward, the ordinal of the innermost layer call (-1: none)."""

    iteration: int
    phase: str
    call: int = -1


def attribute(events: list[Any], calls: list[int], accelerator: bool) -> list[IterationTimes]:
    """Each profiled iteration's kernel time by call, line and operator (the module docstring says how); ``calls``
    holds each iteration's number of layer calls."""
    kernel = _device_time if accelerator else _cpu_time
    times = [IterationTimes(count) for count in calls]
    roots = sorted((event for event in events if event.cpu_parent is None), key=_start)
    main = next((event.thread for event in roots if event.name.startswith(ITERATION)), None)
    windows = _windows(roots, main)
    found: list[tuple[Context, Any]] = []  # top-level operators and where they ran
    created: dict[int, tuple[int, int | str]] = {}  # sequence number -> (iteration, call ordinal or "loss")

    def walk(event: Any, context: Context | None) -> None:
        if event.is_user_annotation:
            if event.name.startswith(PREFIX) and event.name != RECOMPUTATION:
                context = _context_of(event.name, context)
            for child in _children(event):
                walk(child, context)
            return
        if context is None:
            return  # outside every profiled iteration
        found.append((context, event))
        if context.phase in ("forward", "loss_forward"):
            owner: int | str = context.call if context.phase == "forward" else "loss"
            for nested in _subtree(event):
                if nested.sequence_nr >= 0 and nested.scope != _BACKWARD_SCOPE:
                    created[nested.sequence_nr] = (context.iteration, owner)

    for root in roots:
        if root.thread == main:
            walk(root, None)
    for root in roots:  # other threads (an accelerator's autograd workers): placed by the main thread's ranges
        if root.thread != main:
            walk(root, _window(windows, _start(root)))
    for context, event in found:
        _file(times[context.iteration], context, event, kernel, created)
    return times


def _file(times: IterationTimes, context: Context, event: Any, kernel: Callable[[Any], float],
          created: dict[int, tuple[int, int | str]]) -> None:
    """File one top-level operator's kernel time (less what recomputed calls inside it ran) and its operators."""
    recomputed = sum(kernel(op) for op in _recomputed_operators(event))
    spent = kernel(event) - recomputed
    times.lines["recomputation"] += recomputed
    phase = context.phase
    if phase == "forward":
        if context.call >= 0:
            times.forward[context.call] += spent
        else:
            times.lines["outside_layer_calls"] += spent
    elif phase == "backward":
        iteration, owner = created.get(event.sequence_nr, (-1, "engine")) if event.name.startswith(_EVALUATE) \
            else (-1, "engine")
        if iteration == context.iteration and isinstance(owner, int) and owner >= 0:
            times.backward[owner] += spent
        else:
            times.lines["loss_backward" if iteration == context.iteration and owner == "loss" else "engine"] += spent
    else:
        times.lines[phase] += spent
    _operators(event, phase, kernel, times.operators)


def _operators(event: Any, phase: str, kernel: Callable[[Any], float],
               table: dict[tuple[str, str], list[float]]) -> None:
    """An operator's time in the operators table: dispatched operators whole (as the operator FLOPs name them);
    composite operators, autograd nodes and annotations through what they run, their own remainder under their name."""
    children = _children(event) if _transparent(event) else []
    row = table[(phase, _operator_name(event))]
    row[0] += 1
    row[1] += kernel(event) - sum(kernel(child) for child in children)
    for child in children:
        _operators(child, "backward" if child.name == RECOMPUTATION else phase, kernel, table)


def _transparent(event: Any) -> bool:
    return bool(event.is_user_annotation or event.scope == _BACKWARD_SCOPE or event.name.startswith(_EVALUATE)
                or _composite(event.name))


@cache
def _composite(name: str) -> bool:
    """Whether an ``aten::`` operator is implicitly composite (it runs other operators and is not dispatched as
    itself below autograd: ``aten::linear``), by its default overload, else by every overload that exists."""
    namespace, _, op = name.partition("::")
    packet = getattr(getattr(torch.ops, namespace, None), op, None) if namespace == "aten" else None
    if packet is None:
        return False
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    names = ["default"] if "default" in packet.overloads() else [n for n in packet.overloads() if "out" not in n]
    answers = []
    for overload in names:
        try:
            answers.append(getattr(packet, overload).has_kernel_for_dispatch_key(key))
        except RuntimeError:  # an overload the packet lists but the dispatcher does not have
            continue
    return bool(answers) and all(answers)


def _operator_name(event: Any) -> str:
    """``aten.addmm`` as the operator FLOPs name it; an autograd node's range ``autograd.node`` and the engine's
    ``autograd.evaluate_function``; any other range by its name."""
    if event.scope == _BACKWARD_SCOPE:
        return "autograd.node"
    if event.name.startswith(_EVALUATE):
        return "autograd.evaluate_function"
    if event.name == RECOMPUTATION:
        return "recomputed_layer_calls"
    return event.name.replace("::", ".", 1) if not event.is_user_annotation else event.name


def _recomputed_operators(event: Any) -> Iterator[Any]:
    """The top-level operators of the outermost recomputation ranges inside ``event``."""
    pending = list(_children(event))
    while pending:
        nested = pending.pop()
        if nested.is_user_annotation and nested.name == RECOMPUTATION:
            yield from _operators_under(nested)
        else:
            pending.extend(_children(nested))


def _operators_under(event: Any) -> Iterator[Any]:
    for child in _children(event):
        if child.is_user_annotation:
            yield from _operators_under(child)
        else:
            yield child


def _context_of(name: str, context: Context | None) -> Context | None:
    if name.startswith(ITERATION):
        return Context(int(name[len(ITERATION):]), "forward")
    if context is None:
        return None
    if name.startswith(CALL):
        return Context(context.iteration, "forward", int(name[len(CALL):]))
    phase = {LOSS: "loss_forward", BACKWARD: "backward", OPTIMIZER: "optimizer"}.get(name)
    return context if phase is None else Context(context.iteration, phase)


def _windows(roots: list[Any], thread: Any) -> list[tuple[float, float, Context]]:
    """The iterations of ``thread`` and the backward ranges inside them, as (start, end, context)."""
    windows = []
    for root in roots:
        if root.thread == thread and root.name.startswith(ITERATION):
            iteration = int(root.name[len(ITERATION):])
            windows.append((_start(root), _end(root), Context(iteration, "forward")))
            windows.extend((_start(event), _end(event), Context(iteration, "backward"))
                           for event in _subtree(root) if event.is_user_annotation and event.name == BACKWARD)
    return windows


def _window(windows: list[tuple[float, float, Context]], start: float) -> Context | None:
    """The context of the innermost window that contains ``start`` (None outside every iteration)."""
    inside = [(end - begin, context) for begin, end, context in windows if begin <= start <= end]
    return min(inside, key=lambda item: item[0])[1] if inside else None


def _children(event: Any) -> list[Any]:
    return sorted(event.cpu_children, key=_start)


def _subtree(event: Any) -> Iterator[Any]:
    """``event`` and every event under it, in start order."""
    pending = [event]
    while pending:
        current = pending.pop()
        yield current
        pending.extend(reversed(_children(current)))


def _start(event: Any) -> float:
    return float(event.time_range.start)


def _end(event: Any) -> float:
    return float(event.time_range.end)


def _cpu_time(event: Any) -> float:
    return float(event.time_range.elapsed_us())


def _device_time(event: Any) -> float:
    return float(event.device_time_total)


# -- the section ----------------------------------------------------------------------------------------------------


def _seconds(microseconds: list[float]) -> dict[str, float]:
    """The statistics of microseconds, in seconds to the nanosecond (the profiler's resolution)."""
    return {name: round(value, 9) for name, value in spread([value / 1e6 for value in microseconds]).items()}


def time_section(describes: str, request: TimeRequest, measured: list[float], ranges: CallRanges,
                 times: list[IterationTimes], layer_keys: list[tuple[str, int]]) -> dict[str, Any]:
    """The report's ``time`` section from the plain run's ``measured`` seconds and the profiled iterations."""
    keys, parents = ranges.iterations[0]
    if any(iteration_keys != keys for iteration_keys, _ in ranges.iterations) or keys != layer_keys:
        raise RuntimeError("the timed runs made other layer calls than the analyzed forward (control flow that "
                           "depends on values or on state): their times cannot be joined with the report's layers")
    training = describes == "training_step"
    device = request.device
    return {
        "version": VERSION,
        "describes": describes,
        "method": METHOD,
        "kernel_clock": "cpu_operator_time" if device.type == "cpu" else "device_kernel_time",
        **describe_device(device),
        "unit": "seconds",
        "warmup": request.warmup,
        "repeats": request.repeats,
        "measured": {name: round(value, 9) for name, value in spread(measured).items()},
        "kernels": _seconds([iteration.total() for iteration in times]),
        **{name: _seconds([iteration.lines[name] for iteration in times])
           for name in (STEP_LINES if training else FORWARD_LINES)},
        **({"phases": _phases(times)} if training else {}),
        "layers": _layer_rows(keys, parents, times, training),
        "operators": _operator_rows(times),
    }


def _layer_rows(keys: list[tuple[str, int]], parents: list[int], times: list[IterationTimes], training: bool
                ) -> list[dict[str, Any]]:
    """One row per call: self and inclusive (and, in a training step, the backward's) statistics."""
    columns = {"self": [iteration.forward for iteration in times]}
    columns["inclusive"] = [_inclusive(values, parents) for values in columns["self"]]
    if training:
        columns["backward_self"] = [iteration.backward for iteration in times]
        columns["backward_inclusive"] = [_inclusive(values, parents) for values in columns["backward_self"]]
    return [{"path": path, "call_index": call_index,
             **{name: _seconds([values[ordinal] for values in per_iteration])
                for name, per_iteration in columns.items()}}
            for ordinal, (path, call_index) in enumerate(keys)]


def _inclusive(own: list[float], parents: list[int]) -> list[float]:
    """Each call's time with its descendants' (a child's ordinal is larger than its parent's)."""
    inclusive = list(own)
    for ordinal in range(len(inclusive) - 1, -1, -1):
        parent = parents[ordinal]
        if parent >= 0:
            inclusive[parent] += inclusive[ordinal]
    return inclusive


def _phases(times: list[IterationTimes]) -> dict[str, dict[str, float]]:
    """A training step's kernel time by phase; they add up to ``kernels`` in every iteration."""
    per_phase: dict[str, list[float]] = {name: [] for name in PHASES}
    for iteration in times:
        lines = iteration.lines
        per_phase["forward"].append(sum(iteration.forward) + lines["outside_layer_calls"])
        per_phase["loss_forward"].append(lines["loss_forward"])
        per_phase["backward"].append(sum(iteration.backward) + lines["loss_backward"] + lines["engine"]
                                     + lines["recomputation"])
        per_phase["optimizer"].append(lines["optimizer"])
    return {name: _seconds(values) for name, values in per_phase.items()}


def _operator_rows(times: list[IterationTimes]) -> list[dict[str, Any]]:
    """One row per (phase, operator): its calls in an iteration (the first) and its kernel time's statistics."""
    names = sorted({key for iteration in times for key in iteration.operators},
                   key=lambda key: (PHASES.index(key[0]), key[1]))
    rows = []
    for phase, name in names:
        found = [iteration.operators.get((phase, name), (0, 0.0)) for iteration in times]
        rows.append({"phase": phase, "operator": name, "calls": int(found[0][0]),
                     "time": _seconds([row[1] for row in found])})
    return rows


# -- the runs -------------------------------------------------------------------------------------------------------


def time_forward(analysis: Analysis, layer_keys: list[tuple[str, int]]) -> dict[str, Any]:
    """The ``time`` section of the analysis's forward, run as the analysis ran it (its step's modes and gradient
    mode): the plain run's wall clock and the profiled run's kernel time per call; the modes are put back."""
    from ..crawler import restore_training_flags

    request = analysis.timing
    assert request is not None, "time was requested"
    model, args, kwargs, step = analysis.model, analysis.args, analysis.kwargs, analysis.step
    tracer = CallTracer(model, {}, None, None)
    flags = tracer.facts.training_flags
    ranges = CallRanges()

    def forward() -> None:
        model(*args, **kwargs)

    def traced() -> None:
        tracer.attach()
        try:
            forward()
        finally:
            tracer.detach()

    try:
        step.set_modes(model, flags)
        with step.grad_mode(), tracer.subscribed(ranges):
            measured, times = alternated(forward, traced, ranges, request)
    finally:
        restore_training_flags(flags)
    return time_section("forward", request, measured, ranges, times, layer_keys)


def time_training_step(analysis: Analysis, loss: Callable[[Any], Any] | None,
                       make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None, zero_grad: str,
                       layer_keys: list[tuple[str, int]]) -> dict[str, Any]:
    """The ``time`` section of a training step: forward, loss, backward and optimizer step as a loop runs them
    (`LoopStep`); gradients, buffers and the RNG are put back by `torchscan.training.step.preserved_state`, the modes
    by the tracer's flags."""
    from ..crawler import restore_training_flags
    from ..training.step import preserved_state

    request = analysis.timing
    assert request is not None, "time was requested"
    model = analysis.model
    tracer = CallTracer(model, {}, None, None)
    flags = tracer.facts.training_flags
    ranges = CallRanges()
    with ExitStack() as stack:
        stack.enter_context(preserved_state(model))
        stack.callback(restore_training_flags, flags)
        analysis.step.set_modes(model, flags)
        step = LoopStep(analysis, tracer, loss, make_optimizer, zero_grad)
        with torch.enable_grad(), tracer.subscribed(ranges):
            measured, times = alternated(partial(step.run, False), partial(step.run, True), ranges, request)
    return time_section("training_step", request, measured, ranges, times, layer_keys)


class LoopStep:
    """One iteration of a training loop: forward, loss, backward, optimizer step, gradients cleared as ``zero_grad``
    says. `run` runs it bare, or traced: with the tracer attached (through the backward, replaying recomputed calls)
    and each phase in a profiler range.

    The optimizer steps on copies of the trainable parameters that receive the model's gradients, so the weights
    never change (the copies and the optimizer's state are allocated while the step is timed).
    """

    def __init__(self, analysis: Analysis, tracer: CallTracer, loss: Callable[[Any], Any] | None,
                 make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None, zero_grad: str) -> None:
        self.analysis, self.tracer, self.loss, self.zero_grad = analysis, tracer, loss, zero_grad
        self.autocast = getattr(analysis.step, "autocast", ())  # the caller's autocast regions
        self.trainable = [p for p in analysis.model.parameters() if p.requires_grad]
        self.copies = [parameter.detach().clone().requires_grad_() for parameter in self.trainable]
        self.optimizer = None if make_optimizer is None else make_optimizer(self.copies)

    def run(self, traced: bool) -> None:
        from ..training.loop import compute_loss
        from ..training.precision import end_forward_region, outside_autocast

        if self.zero_grad == "zeros":
            for parameter in self.trainable:
                if parameter.grad is None:
                    parameter.grad = torch.zeros_like(parameter)
        output = self.forward(traced)
        with self.phase(LOSS, traced):
            value = compute_loss(self.loss, output)
        end_forward_region(self.autocast)
        del output  # a loop keeps the loss, not the output
        with self.phase(BACKWARD, traced), outside_autocast(self.autocast), \
                (self.tracer.replaying() if traced else nullcontext()):
            value.backward()
        del value
        with self.phase(OPTIMIZER, traced), outside_autocast(self.autocast):
            self.optimizer_step()

    def forward(self, traced: bool) -> Any:
        analysis = self.analysis
        if not traced:
            return analysis.model(*analysis.args, **analysis.kwargs)
        self.tracer.attach()
        try:
            return analysis.model(*analysis.args, **analysis.kwargs)
        finally:
            self.tracer.detach()

    def optimizer_step(self) -> None:
        """The optimizer's step on the copies, then the gradients cleared (set to None, or zeroed in place)."""
        if self.optimizer is not None:
            for copy, parameter in zip(self.copies, self.trainable, strict=True):
                copy.grad = parameter.grad
            self.optimizer.step()
            for copy in self.copies:
                copy.grad = None
        for parameter in self.trainable:
            if self.zero_grad != "zeros":
                parameter.grad = None
            elif parameter.grad is not None:
                parameter.grad.zero_()

    @staticmethod
    def phase(name: str, traced: bool) -> Any:
        return record_function(name) if traced else nullcontext()
