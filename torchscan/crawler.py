"""One analysis: validate the call, run one forward pass under hooks and dispatch, and assemble the report.

State restoration is the contract here: every module's training flag is recorded and restored, every hook is
removed, and nothing else about the model changes, also when the forward raises.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from operator import itemgetter, methodcaller
from typing import Any, Literal

import torch
from torch import nn

from .builtin_handlers import builtin_for
from .calls.decode import kv_cache_section
from .calls.errors import forward_error_notes
from .calls.inputs import resolve_call
from .calls.meta_kernels import ACCELERATOR, ReplayedCalls, check_meta_kernels, meta_attention, runs_on_meta
from .calls.stand_ins import StandIns, stand_in_device, standing_in
from .diagnostics import Diagnostic, diagnostic, sort_key
from .findings import incomplete_message
from .handlers import ModuleHandler, validate_handler_map
from .memory.forward import ForwardMemory, layer_memories, memory_section, memory_totals, traced_forward
from .module_facts import OwnTensors, tensor_statistics
from .operators import (
    NOT_REQUESTED_BYTES,
    OperatorRecorder,
    build_formula_table,
    bytes_report,
    new_recorder,
    operator_name,
    operator_report,
    validate_custom_mapping,
)
from .records import CallParts, layer_record
from .results import (
    METRIC_UNITS,
    MODEL,
    SUM_OF_LAYER_ESTIMATES,
    SUMMABLE_METRICS,
    add_results,
    as_lower_bound,
    incomplete_metrics,
    not_requested,
)
from .schema import SCHEMA_VERSION
from .timing.measured import collector_paused
from .timing.profiled import TimeRequest, time_forward, time_request
from .tracing import CallTracer
from .values import call_metadata
from .version import __version__

Mode = Literal["full", "structure"]


class IncompleteAnalysisError(RuntimeError):
    """Raised by ``strict=True`` when a requested metric is incomplete; ``.report`` keeps the evidence."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report


def crawl_module(
    model: nn.Module,
    input_shape: Any = None,
    dtype: Any = None,
    *,
    args: tuple | list | None = None,
    kwargs: Mapping[str, Any] | None = None,
    device: torch.device | str | None = None,
    custom_modules: Mapping[type, ModuleHandler] | None = None,
    custom_mapping: Mapping[Any, Any] | None = None,
    mode: Mode = "full",
    strict: bool = False,
    memory: bool = False,
    as_device: torch.device | str | None = None,
    meta_kernels: str = ACCELERATOR, time: bool | Mapping[str, int] = False,
) -> dict[str, Any]:
    """Analyze one forward pass of ``model`` and return the versioned, JSON-serializable report.

    Pass either ``input_shape`` (shapes without the batch dimension; inputs are generated) or the complete call
    as ``args``/``kwargs`` (forwarded unchanged). ``mode="structure"`` reports structure only; ``strict=True``
    raises `IncompleteAnalysisError` when any requested metric is incomplete. ``memory=True`` traces the bytes of
    live tensors through the forward (in either mode) and adds the ``memory`` section, the ``forward_peak_bytes``
    and ``activations`` totals and each layer record's ``memory`` (docs/methodology.md). ``as_device="cpu"`` runs on
    fake-tensor stand-ins on that device: its kernel choices, nothing allocated (`torchscan.calls.stand_ins`).
    On ``meta`` (without ``as_device``), ``meta_kernels="accelerator"`` (the default) runs each
    ``scaled_dot_product_attention`` as the fused kernel CUDA would pick for it, never materializing the score
    matrices; ``meta_kernels="math"`` keeps meta's own math path (`torchscan.calls.meta_kernels`).
    ``time=True``: the forward timed per layer call on the model's device, apart from the analysis (`torchscan.timing`).
    """
    check_flags(model, strict=strict, memory=memory)
    analysis = request(model, input_shape, dtype, args, kwargs, device, custom_modules, custom_mapping,
                       mode=mode, memory=memory, as_device=as_device, meta_kernels=meta_kernels, time=time)
    with running(analysis) as run:
        report = analyze(run)
    if analysis.timing is not None:  # runs of its own: the analysis's overhead is in no time
        report["time"] = time_forward(analysis, layer_keys(report))
    if strict:
        raise_if_incomplete(report)
    return report


def check_flags(model: Any, **flags: Any) -> None:
    """The model and the boolean options of an entry point, checked (errors name the argument)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")


def request(model: nn.Module, input_shape: Any, dtype: Any, args: Any, kwargs: Any, device: Any,
            custom_modules: Mapping[type, ModuleHandler] | None, custom_mapping: Mapping[Any, Any] | None, *,
            mode: Mode = "full", memory: bool = False, as_device: Any = None, step: ForwardStep | None = None,
            meta_kernels: str = ACCELERATOR, time: Any = False) -> Analysis:
    """The one request builder of every entry point: its arguments checked (errors name the argument), as an
    `Analysis`."""
    if mode not in ("full", "structure"):
        raise ValueError(f"mode must be 'full' or 'structure', got {mode!r}")
    timing = time_request(time)
    stand_in = stand_in_device(as_device)
    kernels = check_meta_kernels(meta_kernels)
    handlers = validate_handler_map(custom_modules)
    mapping = validate_custom_mapping(custom_mapping)
    call_args, call_kwargs, source = resolve_call(model, input_shape, dtype, args, kwargs, device)
    on_meta = stand_in is None and runs_on_meta(model, call_args, call_kwargs)
    return Analysis(model=model, args=call_args, kwargs=call_kwargs, source=source, handlers=handlers,
                    mapping=mapping, mode=mode, step=step or EVAL_FORWARD, memory=memory, as_device=stand_in,
                    kv_cache=kv_cache_section(call_args, call_kwargs), meta_kernels=kernels if on_meta else None,
                    timing=None if timing is None else timing.on(model, call_args, call_kwargs, stand_in))


class ForwardStep:
    """How the traced forward runs: ``crawl_module``'s is one forward in eval mode under ``no_grad``.

    The training step (`torchscan.training.step`) subclasses it to run the forward in train mode with gradients on and
    to observe the autograd graph it builds; the tracer, the recorder and the report assembly stay shared.
    """

    def execution(self) -> dict[str, Any]:
        """The report's ``context.execution``."""
        return {"mode": "eval", "grad": "no_grad", "forward_passes": 1}

    def set_modes(self, model: nn.Module, training_flags: list[tuple[nn.Module, bool]]) -> None:
        """Put the model in the step's mode (the flags are restored after the forward)."""
        if any(map(itemgetter(1), training_flags)):
            model.eval()

    def grad_mode(self) -> Any:
        """The gradient mode of the forward, a context manager."""
        return torch.no_grad()

    #: Whether the step continues the forward's memory trace (a training step does), or it ends with the forward.
    continues_trace = False

    def forward(self, analysis: Analysis, tracer: CallTracer, probe: ForwardMemory | None) -> Any:
        """Run the forward with the tracer attached (and the recorder active in a full analysis); ``probe`` traces
        its memory when asked."""
        return analysis.model(*analysis.args, **analysis.kwargs)


EVAL_FORWARD = ForwardStep()


@dataclass(frozen=True, kw_only=True)
class Analysis:
    """One requested analysis, validated: the model, the call (and whether its inputs were generated or provided),
    the caller's module handlers and operator formulas, and the mode."""

    model: nn.Module
    args: tuple
    kwargs: dict[str, Any]
    source: str
    handlers: dict[type, ModuleHandler]
    mapping: dict[Any, Any]
    mode: Mode
    step: ForwardStep = EVAL_FORWARD
    memory: bool = False
    as_device: torch.device | None = None  # run on fake-tensor stand-ins of this device (`torchscan.calls.stand_ins`)
    stand_ins: StandIns | None = None  # the stand-ins, while `running` holds them
    #: ``{"kv_cache": ...}`` when the call passes a KV cache (`kv_cache_section`), else empty: read from the caller's
    #: own cache when the request is built, before the step appends to it and outside any stand-in
    kv_cache: dict[str, Any] = field(default_factory=dict)
    #: The attention kernels of an analysis on meta without ``as_device`` (`torchscan.calls.meta_kernels`):
    #: ``"accelerator"`` or ``"math"``; None elsewhere, where the device's own kernels run.
    meta_kernels: str | None = None
    replayed: ReplayedCalls | None = None  # keeps the accelerator's kernels for calls re-run in a backward
    timing: TimeRequest | None = None  # ``time=True``: timed after the analysis, on this device (`torchscan.timing`)

    @property
    def full(self) -> bool:
        return self.mode == "full"


@contextmanager
def running(analysis: Analysis) -> Iterator[Analysis]:
    """The analysis as it runs: on stand-ins of ``as_device`` when asked (the model's parameters and buffers
    swapped for the block and the call's tensors replaced, inside objects such as KV caches too; the model's own
    tensors and the caller's values are as they were afterwards, also after an error); on meta, with the attention
    kernels ``meta_kernels`` names, for the whole block (a training step's loss and backward run inside it:
    activation checkpointing recomputes forwards there)."""
    if analysis.as_device is None:
        with meta_attention(analysis.meta_kernels) as replayed:
            yield analysis if replayed is None else replace(analysis, replayed=replayed)
        return
    with standing_in(analysis.model, analysis.as_device) as stand_ins, \
            stand_ins.call(analysis.args, analysis.kwargs) as (args, kwargs):
        yield replace(analysis, args=args, kwargs=kwargs, stand_ins=stand_ins)


def analyze(analysis: Analysis) -> dict[str, Any]:
    inputs = {"source": analysis.source, **call_metadata(analysis.args, analysis.kwargs), **analysis.kv_cache}
    # An analysis allocates a few small dicts and lists per layer call that all survive it (the report), so the
    # collector would run often and trigger full collections that walk every object of the process (torch alone
    # holds ~170,000: about 0.1 s each). Nothing an analysis builds is cyclic; reference counting frees the rest.
    with collector_paused():
        # the analysis state (tracer, recorder, memos) dies with _traced_report's frame, before the collector is back
        return _traced_report(analysis, inputs)


def _traced_report(analysis: Analysis, inputs: dict[str, Any]) -> dict[str, Any]:
    """Run the forward under the tracer (and the recorder in a full analysis), then assemble the report."""
    model = analysis.model
    recorder = new_recorder(build_formula_table(analysis.mapping)) if analysis.full else None
    tracer = CallTracer(model, analysis.handlers, recorder, builtin_for)
    if analysis.replayed is not None:  # for the tracer's life: a training step's backward re-runs calls
        tracer.subscribers.append(analysis.replayed)
    training_flags = tracer.facts.training_flags
    step = analysis.step
    probe = None
    try:
        step.set_modes(model, training_flags)
        tracer.attach()
        with ExitStack() as stack:
            stack.enter_context(step.grad_mode())
            if analysis.memory:  # before the recorder: setting up the trace may run an operator of its own
                probe = stack.enter_context(traced_forward(model, analysis.args, analysis.kwargs, tracer,
                                                           recorder, analysis.stand_ins, analysis.meta_kernels))
            if recorder is not None:
                stack.enter_context(recorder)
            if analysis.stand_ins is not None:
                stack.enter_context(analysis.stand_ins.device_queries())
            with forward_error_notes(tracer, analysis.source, analysis.args):
                step.forward(analysis, tracer, probe)
    finally:
        tracer.detach()
        restore_training_flags(training_flags)
    report = _assemble(analysis, tracer, recorder, inputs, probe)
    if probe is not None and not step.continues_trace:
        probe.close()
    return report


def _assemble(analysis: Analysis, tracer: CallTracer, recorder: OperatorRecorder | None, inputs: dict[str, Any],
              probe: ForwardMemory | None) -> dict[str, Any]:
    """The report of a finished forward, built once: parameter statistics (lazy modules have materialized now),
    records, totals, operator FLOPs, diagnostics and, when traced, memory."""
    kinds: set[tuple[str, str]] = set()
    statistics = tensor_statistics(tracer.facts.modules_after_forward(analysis.model), kinds)
    context = _context(analysis, tracer.facts.training_flags, kinds)
    layers = _layers(tracer.calls, statistics, probe)
    diagnostics = list(tracer.diagnostics)
    if recorder is not None:
        operator_totals = recorder.totals()
        operators, operator_diagnostics = operator_report(operator_totals, analysis.mapping, recorder)
        diagnostics.extend(operator_diagnostics)
        operator_bytes = bytes_report(operator_totals)
    else:
        operators = {"total": not_requested("FLOPs", MODEL), "by_operator": [], "uncounted": [], "ignored": [],
                     "custom_formulas": []}
        operator_bytes = {**NOT_REQUESTED_BYTES, "total": not_requested("bytes", MODEL), "by_operator": []}
    totals = _totals(statistics, layers, operators["total"], analysis.full)
    totals["operator_bytes"] = dict(operator_bytes["total"])
    if tracer.foreign_thread_calls:
        diagnostics.append(_as_unobserved_threads(tracer.foreign_thread_calls, totals, operators, operator_bytes))
    memory = None if probe is None else memory_section(probe)
    if memory is not None:
        totals.update(memory_totals(memory))
    return {
        "schema_version": SCHEMA_VERSION,
        "context": context,
        "inputs": inputs,
        "layers": layers,
        "totals": totals,
        "operator_flops": operators,
        "operator_bytes": operator_bytes,
        "diagnostics": sorted(diagnostics, key=sort_key),
        **({} if memory is None else {"memory": memory}),
    }


def _layers(calls: list[CallParts], statistics: dict[str, OwnTensors],
            probe: ForwardMemory | None) -> list[dict[str, Any]]:
    """Every call's record, assembled from its parts (a module's later calls get copies of its first call's
    statistics), with its memory when traced."""
    memory_of = None if probe is None else layer_memories(probe)
    layers = []
    for parts in calls:
        parameters, buffers = statistics[parts.path]
        if parts.call_index:
            parameters, buffers = dict(parameters), dict(buffers)
        layers.append(layer_record(parts, parameters, buffers, None if memory_of is None else memory_of(parts)))
    return layers


def _as_unobserved_threads(calls: int, totals: dict[str, Any], operators: dict[str, Any],
                           operator_bytes: dict[str, Any]) -> Diagnostic:
    """Module calls ran in other threads, unobserved: every total becomes a lower bound, and a diagnostic says why."""
    for name in (*SUMMABLE_METRICS, "operator_flops", "operator_bytes"):
        totals[name] = as_lower_bound(totals[name])
    operators["total"] = dict(totals["operator_flops"])
    operator_bytes["total"] = dict(totals["operator_bytes"])
    return diagnostic("unobserved_thread", f"{calls} module call(s) ran in other threads, where neither hooks nor "
                      "dispatch observe work; every total is a lower bound")


def _totals(statistics: dict[str, OwnTensors], layers: list[dict[str, Any]],
            operator_total: dict[str, Any], full: bool) -> dict[str, Any]:
    """Model totals: every tensor once (the per-module statistics already attribute shared ones once), and the
    module-view sums of the retained layer estimates."""
    own_parameters = [own.parameters for own in statistics.values()]
    own_buffers = [own.buffers for own in statistics.values()]
    parameters = {"total": _sum_of("count", own_parameters), "trainable": _sum_of("trainable", own_parameters),
                  "frozen": _sum_of("frozen", own_parameters), "bytes": _sum_of("bytes", own_parameters)}
    buffers = {"total": _sum_of("count", own_buffers), "bytes": _sum_of("bytes", own_buffers)}
    totals: dict[str, Any] = {"parameters": parameters, "buffers": buffers}
    layer_metrics = [layer["metrics"] for layer in layers] if full else []
    for name in SUMMABLE_METRICS:
        unit = METRIC_UNITS[name]
        if full:  # the layers that have a result for the field (results are non-empty mappings)
            totals[name] = add_results(filter(None, map(methodcaller("get", name), layer_metrics)), unit, MODEL,
                                       SUM_OF_LAYER_ESTIMATES)
        else:
            totals[name] = not_requested(unit, MODEL)
    totals["operator_flops"] = dict(operator_total)
    return totals


def _sum_of(key: str, statistics: list[dict[str, int]]) -> int:
    return sum(map(itemgetter(key), statistics))


def _context(analysis: Analysis, training_flags: list[tuple[nn.Module, bool]], kinds: set[tuple[str, str]]
             ) -> dict[str, Any]:
    """The conditions of the analysis; ``kinds`` holds the (device type, dtype) of every parameter and buffer."""
    kind = type(analysis.model)
    return {
        "torchscan": __version__,
        "torch": str(torch.__version__),  # a plain str, not TorchVersion: unpickling a report must not import torch
        "python": platform.python_version(),
        "model_type": f"{kind.__module__}.{kind.__qualname__}",
        "execution": analysis.step.execution(),
        "prior_training": {"root": bool(analysis.model.training),
                           "training_modules": sum(map(itemgetter(1), training_flags)),
                           "modules": len(training_flags)},
        "devices": sorted({device for device, _ in kinds}),
        "dtypes": sorted({dtype for _, dtype in kinds}),
        "analysis_mode": analysis.mode,
        "custom_modules": sorted(({"type": f"{k.__module__}.{k.__qualname__}", "method": h.caller_label,
                                   "subtree_metrics": sorted(h.subtree_metrics)} for k, h in analysis.handlers.items()),
                                 key=lambda row: row["type"]),
        "custom_formulas": sorted(operator_name(p) for p in analysis.mapping),
        **({} if analysis.stand_ins is None else {"stand_ins": analysis.stand_ins.record()}),
        **({} if analysis.meta_kernels is None else {"meta_kernels": analysis.meta_kernels}),
    }


def layer_keys(report: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The ``(path, call_index)`` of every layer record, in order: what a timed run's calls must match."""
    return [(layer["path"], layer["call_index"]) for layer in report["layers"]]


def restore_training_flags(training_flags: list[tuple[nn.Module, bool]]) -> None:
    """Put every module back in the mode it had, through its own ``train(mode)`` so that overrides run.

    Models clear eval-time caches in their ``train()`` (timm's LeViT and EfficientFormer drop their attention-bias
    cache): assigning ``training`` would skip that. The flags are in ``model.modules()`` order, parents first:
    ``train(mode)`` on the root sets the whole tree, then each module whose flag still differs is switched, which
    also switches its descendants before they are visited. An override that ignores ``mode`` is corrected last,
    by assignment, so that every flag ends as it was.
    """
    switched = False
    for module, flag in training_flags:
        if module.training != flag:
            module.train(flag)
            switched = True
    if not switched:  # the common case: the forward left every flag as it was
        return
    for module, flag in training_flags:
        if module.training != flag:
            module.training = flag


def raise_if_incomplete(report: dict[str, Any]) -> None:
    if incomplete_metrics(report):
        raise IncompleteAnalysisError(incomplete_message(report), report)
