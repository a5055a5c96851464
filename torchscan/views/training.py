"""The training step of a report (``crawl_training_step``'s ``training`` section) as plain rows: the breakdown of
one step (forward, loss, backward and its parts, optimizer, whole step) and the layer calls that cost the most
backward FLOPs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..wire import call_key, index_by_call
from .cells import Cell, counted, metric_cell
from .layers import layer_label

#: The step's totals in the order the breakdown shows them: key, label, whether it is a part of the backward.
TRAINING_PARTS = (
    ("forward", "Forward (train mode)", False),
    ("loss_forward", "Loss forward", False),
    ("backward", "Backward", False),
    ("layers_backward", "Layer calls", True),
    ("loss_backward", "Loss", True),
    ("engine", "Engine (gradient sums, accumulation)", True),
    ("recomputation", "Recomputation (activation checkpointing)", True),
    ("optimizer", "Optimizer step", False),
    ("step", "Whole step", False),
)
#: How many layer calls the top-layers table lists.
TOP_LAYER_CALLS = 10


@dataclass(frozen=True)
class TrainingPart:
    """One row of the breakdown: ``part_of_backward`` rows are "of which" rows of the backward total."""

    key: str
    label: str
    flops: Cell
    part_of_backward: bool


@dataclass(frozen=True)
class TrainingLayer:
    """A layer call ranked by the backward FLOPs of its own autograd nodes (direct, so parents do not outrank it)."""

    label: str
    type: str
    forward: Cell
    backward: Cell
    ratio: str  # backward / forward operator FLOPs of the call, "—" when either is not an exact number


@dataclass(frozen=True)
class TrainingView:
    """The step in words (`optimizer_text`, `devices_text`, `precision_text`), its breakdown and top layer calls."""

    optimizer: str
    loss: str
    devices: str
    precision: str
    parts: list[TrainingPart]
    top_layers: list[TrainingLayer]


def training_view(report: dict[str, Any]) -> TrainingView | None:
    """The training step's breakdown and top layer calls, or None for a report without a ``training`` section."""
    section = report.get("training")
    if section is None:
        return None
    totals = section["totals"]
    parts = [TrainingPart(key, label, metric_cell(totals[key]), part) for key, label, part in TRAINING_PARTS]
    return TrainingView(optimizer=optimizer_text(section["optimizer"]), loss=section["loss"]["description"],
                        devices=devices_text(section["devices"]), precision=precision_text(section["precision"]),
                        parts=parts, top_layers=top_backward_layers(report["layers"], section["layers"]))


def optimizer_text(optimizer: dict[str, Any] | None) -> str:
    """``adamw (torch.optim.adamw.AdamW, foreach)``: the optimizer, its class and the implementation that ran
    (``foreach + single_tensor`` when param groups differ), or ``none``."""
    if optimizer is None:
        return "none"
    implementation = " + ".join(optimizer["implementation"].split("+"))
    return f"{optimizer['name']} ({optimizer['type']}, {implementation})"


#: The dtypes a precision policy names, in the order a sentence names them: key, words.
PRECISION_ROLES = (("parameters", "parameters"), ("gradients", "gradients"), ("optimizer_state", "optimizer state"))


def precision_text(precision: dict[str, Any]) -> str:
    """The step's precision policy in words: ``float32`` (one dtype throughout), ``pure bfloat16``, ``autocast
    bfloat16 on cpu, float32 parameters, gradients and optimizer state``, ``mixed parameter dtypes: bfloat16/float32
    parameters and gradients, float32 optimizer state``."""
    roles = dtype_roles(precision)
    single = roles[0][0] if len(roles) == 1 and "/" not in roles[0][0] else None
    policy = precision["policy"]
    if policy == "autocast":
        regions = " and ".join(f"{region['dtype']} on {region['device_type']}" for region in precision["autocast"])
        return f"autocast {regions}, {roles_text(roles)}" if roles else f"autocast {regions}"
    if policy == "pure_low_precision":
        return f"pure {single}" if single else f"pure low precision: {roles_text(roles)}"
    if policy == "mixed_parameters":
        return f"mixed parameter dtypes: {roles_text(roles)}"
    return single or roles_text(roles) or "no floating-point tensors trained"


def dtype_roles(precision: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The dtypes (``bfloat16/float32`` where a role holds several) with the roles that hold them, in the order of
    `PRECISION_ROLES`: ``[("float32", ["parameters", "gradients", "optimizer state"])]``; empty roles left out."""
    grouped: dict[str, list[str]] = {}
    for key, words in PRECISION_ROLES:
        if precision[key]:
            grouped.setdefault("/".join(precision[key]), []).append(words)
    return list(grouped.items())


def roles_text(roles: list[tuple[str, list[str]]]) -> str:
    """``bfloat16 parameters and gradients, float32 optimizer state``."""
    return ", ".join(f"{dtypes} {_and(words)}" for dtypes, words in roles)


def _and(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def devices_text(devices: list[str]) -> str:
    """``the meta device``, ``the cpu and cuda devices``: where the step's operators ran, in words."""
    if not devices:
        return "no device"
    return f"the {_and(devices)} device" + ("s" if len(devices) > 1 else "")


def top_backward_layers(layers: list[dict[str, Any]], backward: list[dict[str, Any]]) -> list[TrainingLayer]:
    """The `TOP_LAYER_CALLS` calls with the most direct backward FLOPs (ties in call order), zero-cost calls left out.

    Calls are joined by ``(path, call_index)``: the forward may come from another analysis of the same call."""
    by_key = index_by_call(layers)
    ranked = sorted((item for item in backward if counted(item["backward_flops"]["direct"]) > 0),
                    key=lambda item: -counted(item["backward_flops"]["direct"]))
    return [_training_layer(by_key[call_key(item)], item["backward_flops"]["direct"])
            for item in ranked[:TOP_LAYER_CALLS] if call_key(item) in by_key]


def _training_layer(layer: dict[str, Any], backward: dict[str, Any]) -> TrainingLayer:
    forward = layer["operator_flops"]["direct"]
    exact = forward["status"] == backward["status"] == "complete" and forward["value"]
    ratio = f"{backward['value'] / forward['value']:.2f}×" if exact else "—"
    return TrainingLayer(layer_label(layer["path"], layer["call_index"]), layer["type"], metric_cell(forward), metric_cell(backward), ratio)
