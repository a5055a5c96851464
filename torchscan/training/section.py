"""The ``training`` section of a training-step report, built from the operator scopes of the step's phases.

`torchscan.training.step` runs the step and fills a `Phases` (the loss, the backward per owner, the engine's own work,
recomputation and the optimizer step, each an `OperatorScope` of one recorder); this module turns it, with the
forward's report, into the section: per layer call backward FLOPs (direct and inclusive) and the step's totals,
and says under ``strict=True`` what went uncounted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..crawler import IncompleteAnalysisError
from ..memory.training_step import StepMemory, step_memory_section
from ..operators import OperatorRecorder, OperatorScope, flops_result, operator_report
from ..results import DIRECT, INCLUSIVE, MODEL, OPERATOR_DISPATCH, ROOT_LABEL, MetricResult, add_results, not_requested
from ..wire import call_key, positions_by_call

TRAINING_VERSION = 2
LOSS = "loss"
DEFAULT_LOSS = "sum of every floating-point output tensor that requires grad"
BACKWARD_PARTS = ("layers_backward", "loss_backward", "engine", "recomputation")
Owner = int | str  # a layer call's index in the report's layers, or LOSS


class Phases:
    """The operator scopes of the step after the forward, all in one recorder."""

    def __init__(self, recorder: OperatorRecorder) -> None:
        self.recorder = recorder
        self.loss_forward = OperatorScope()
        self.engine = OperatorScope()
        self.optimizer = OperatorScope()  # the steady-state optimizer step, whose FLOPs the totals count
        self.recomputation = OperatorScope()  # module calls re-run during the backward (activation checkpointing)
        self.backward: dict[Owner, OperatorScope] = {}
        self.optimizer_type: str | None = None
        self.optimizer_implementation: str | None = None  # foreach, single_tensor, fused
        self.state: list[Any] = []  # the optimizer's state tensors after the step
        self.precision: dict[str, Any] = {}  # `torchscan.training.precision.precision_section`
        self.loss_default = True

def training_section(report: dict[str, Any], phases: Phases, mapping: Mapping[Any, Any], optimizer: Any,
                     memory: StepMemory | None = None) -> dict[str, Any]:
    """The ``training`` section: backward FLOPs per layer call, totals, loss, optimizer, devices, precision, memory."""
    layers = report["layers"]
    section_layers = _layer_backward(layers, phases)
    operators, diagnostics = operator_report(phases.recorder.totals(), mapping, phases.recorder)
    section: dict[str, Any] = {
        "version": TRAINING_VERSION,
        "devices": list(report["context"]["devices"]),
        "loss": {"source": "default" if phases.loss_default else "callable",
                 "description": DEFAULT_LOSS if phases.loss_default else "the caller's loss(output)"},
        "optimizer": None if optimizer is None else {
            "name": optimizer if isinstance(optimizer, str) else "callable", "type": phases.optimizer_type,
            "implementation": phases.optimizer_implementation, "counted_on": "meta"},
        "precision": phases.precision,
        "totals": _totals(report, section_layers, phases),
        "layers": section_layers,
        "operator_flops": operators,
        "diagnostics": diagnostics,
    }
    if memory is not None:  # the step's memory, and its steady-state peak as the training_peak_bytes total
        section["memory"] = step_memory_section(memory)
        section["totals"]["training_peak_bytes"] = dict(section["memory"]["peak"])
    return section


def _layer_backward(layers: list[dict[str, Any]], phases: Phases) -> list[dict[str, Any]]:
    """Each layer call's backward FLOPs: direct (its own nodes) and inclusive (its descendants' added)."""
    empty = OperatorScope()
    direct = [phases.backward.get(index, empty) for index in range(len(layers))]
    flops = [scope.flops for scope in direct]
    uncounted = [scope.uncounted for scope in direct]
    position = positions_by_call(layers)
    for index in range(len(layers) - 1, -1, -1):  # children start after their parent: they are added first
        parent = layers[index]["parent"]
        if parent is not None:
            into = position[call_key(parent)]
            flops[into] += flops[index]
            uncounted[into] = uncounted[into] or uncounted[index]
    return [{"path": layer["path"], "call_index": layer["call_index"],
             "backward_flops": {DIRECT: flops_result(direct[index].flops, DIRECT, direct[index].uncounted),
                                INCLUSIVE: flops_result(flops[index], INCLUSIVE, uncounted[index])}}
            for index, layer in enumerate(layers)]


def _totals(report: dict[str, Any], layers: list[dict[str, Any]], phases: Phases) -> dict[str, MetricResult]:
    """Forward, loss, layer backward, engine, backward, optimizer and whole-step FLOPs, each a MetricResult."""
    method = OPERATOR_DISPATCH
    loss_backward = phases.backward.get(LOSS, OperatorScope())
    parts: dict[str, MetricResult] = {
        "forward": dict(report["operator_flops"]["total"]),  # type: ignore[dict-item]
        "loss_forward": flops_result(phases.loss_forward.flops, MODEL, phases.loss_forward.uncounted),
        "layers_backward": add_results((layer["backward_flops"][DIRECT] for layer in layers), "FLOPs", MODEL, method),
        "loss_backward": flops_result(loss_backward.flops, MODEL, loss_backward.uncounted),
        "engine": flops_result(phases.engine.flops, MODEL, phases.engine.uncounted),
        "recomputation": flops_result(phases.recomputation.flops, MODEL, phases.recomputation.uncounted),
    }
    parts["backward"] = add_results((parts[name] for name in BACKWARD_PARTS), "FLOPs", MODEL, method)
    steps = [parts[name] for name in ("forward", "loss_forward", "backward")]
    if phases.optimizer_type is None:
        parts["optimizer"] = not_requested("FLOPs", MODEL)
    else:
        parts["optimizer"] = flops_result(phases.optimizer.flops, MODEL, phases.optimizer.uncounted)
        steps.append(parts["optimizer"])
    parts["step"] = add_results(steps, "FLOPs", MODEL, method)
    return parts


def raise_if_training_incomplete(report: dict[str, Any], phases: Phases) -> None:
    """``strict=True``: the loss, backward or optimizer ran operators without a formula."""
    uncounted = [row["operator"] for row in report["training"]["operator_flops"]["uncounted"]]
    if not uncounted:
        return
    layers = report["layers"]
    calls = [f"{layers[owner]['path'] or ROOT_LABEL}#{layers[owner]['call_index']}"
             for owner, scope in phases.backward.items() if scope.uncounted and isinstance(owner, int)]
    raise IncompleteAnalysisError(
        f"the training step ran uncounted operators {', '.join(uncounted)}"
        + (f" in the backward of the layer calls {', '.join(sorted(calls))}" if calls else ""), report)
