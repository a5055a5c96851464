"""The memory of a report (``crawl_module(..., memory=True)``'s ``memory`` section, and the training step's) as
plain rows: what is live at the peak and where the peak is.

Every byte figure is the traced definition (``traced_live_tensor_bytes``): the bytes of live tensors, without the
allocator's caching, fragmentation or kernel workspaces. A report without the section was not asked for memory;
its view is ``None`` and the pages show ``—``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..findings import layer_label
from ..wire import call_key
from .cells import Cell, counted, metric_cell
from .formatting import format_percent

#: What is live at the forward's peak, in the order the breakdown shows it: key, label.
FORWARD_PARTS = (("parameters", "Parameters"), ("buffers", "Buffers"), ("inputs", "Inputs"),
                 ("activations", "Created during the forward"))
#: What is live at the training step's peak: key, label.
TRAINING_PARTS = (("parameters", "Parameters"), ("buffers", "Buffers"),
                  ("autocast_weight_copies", "Autocast weight copies"), ("gradients", "Gradients"),
                  ("optimizer_state", "Optimizer state"), ("saved_activations", "Activations saved for backward"),
                  ("temporaries", "Temporaries"), ("inputs", "Inputs"))
#: Categories a peak shows only when they hold bytes: a step without autocast has no weight copies, and a row of
#: zeros in every such report would say nothing (the shares still add up: an exact zero is 0% of the peak).
SHOWN_WHEN_PRESENT = frozenset({"autocast_weight_copies"})
#: The steps a training memory section may describe, in words.
DESCRIBED_STEPS = {"steady_state": "steady state"}
#: What a training step may find resident at its start, left by the step before: key, label. Shown only when not an
#: exact zero (no optimizer state without an optimizer, no gradients with ``zero_grad="set_to_none"``).
RESIDENT_PARTS = (("optimizer_state", "Resident from the step's start: optimizer state"),
                  ("gradients", "Resident from the step's start: gradients (zero_grad='zeros' keeps them)"))
#: The same, in a phrase: key, words.
RESIDENT_WORDS = {"optimizer_state": "optimizer state", "gradients": "gradients"}
#: Where a peak is when no operator ran (an empty forward): nothing to name.
NO_OPERATOR = "no operator ran"
#: How many layer calls the largest-outputs and largest-saved lists name.
TOP_MEMORY_CALLS = 10


@dataclass(frozen=True)
class MemoryPart:
    """One category live at a peak, with its share of that peak."""

    key: str
    label: str
    bytes: Cell
    share: str


@dataclass(frozen=True)
class MemoryCall:
    """A layer call with a byte figure: its output (forward) or the activations it saved for backward (training)."""

    label: str
    type: str
    bytes: Cell


@dataclass(frozen=True)
class FirstStepMemory:
    """The first step of a training loop, where the optimizer creates its state: its peak, phase, operator and
    breakdown, or (``traced`` false) the peak's ``n/a`` cell and the note that says why it was not traced."""

    peak: Cell
    #: ``forward``, ``backward`` or ``optimizer``; empty when the first step was not traced.
    phase: str
    operator: str
    parts: list[MemoryPart]
    note: str

    @property
    def traced(self) -> bool:
        return bool(self.phase)

    @property
    def label(self) -> str:
        """The row beside the steady state's peak."""
        return "All live bytes at the first training step's peak (the optimizer creates its state)"

    @property
    def where(self) -> str:
        """``backward · aten.mm``; the note when the first step was not traced."""
        return f"{self.phase} · {self.operator}" if self.traced else self.note

    @property
    def bar_label(self) -> str:
        """The chart's bar: ``First training step peak (backward)``."""
        return f"First training step peak ({self.phase})"


@dataclass(frozen=True)
class TrainingMemory:
    """The training step's peak (forward, backward and optimizer step), broken down at the peak.

    The peak is the steady state's (``describes``): the step as it runs inside a loop, with what the step before
    left (the optimizer's state, gradients kept by ``zero_grad='zeros'``) resident from its start. The first step
    is a second figure, kept only where it tells something: when its peak or phase differs, or it was not traced."""

    device: str
    kernel: str
    peak: Cell
    phase: str
    operator: str
    parts: list[MemoryPart]
    top_saved: list[MemoryCall]
    describes: str
    #: ``set_to_none`` or ``zeros``: whether the gradients are kept between steps.
    zero_grad: str
    resident: list[MemoryPart]
    first_step: FirstStepMemory | None

    @property
    def step(self) -> str:
        """The step the peak describes, in words: ``steady state``."""
        return DESCRIBED_STEPS[self.describes]

    @property
    def resident_words(self) -> str:
        """``optimizer state and gradients``: what the steady state holds from its start, in words."""
        return " and ".join(RESIDENT_WORDS[part.key] for part in self.resident)

    @property
    def peak_label(self) -> str:
        """The row of the headline peak: which step it describes, so that no reader takes it for the first."""
        held = f"{self.resident_words} resident from its start" if self.resident else "nothing left by a previous step"
        return f"All live bytes at the training step's peak, {self.step} ({held})"

    @property
    def bar_label(self) -> str:
        """The chart's bar of the headline peak: ``Training step peak, steady state (optimizer)``."""
        return f"Training step peak, {self.step} ({self.phase})"


@dataclass(frozen=True)
class KeptCache:
    """A KV cache the forward's output holds (``memory.output_cache``): its class, the part of the forward peak that
    is its keys and values, and every byte it holds."""

    cache_class: str
    at_peak: Cell
    total: Cell

    @property
    def note(self) -> str:
        """What the row beside the peak says."""
        return (f"the output holds a {self.cache_class} ({self.total.text} in all), which keeps its keys and values "
                "alive: a model that returns only its logits peaks lower")


@dataclass(frozen=True)
class ForwardMemory:
    """The forward's peak, what is live there and where it happens, and the largest outputs."""

    device: str
    kernel: str
    #: All live tensor bytes at the peak, parameters included.
    peak: Cell
    #: The bytes created during the forward live at the peak (parameters, buffers and inputs excluded).
    forward_peak: Cell
    activations: Cell
    #: Where the peak is: ``layer call encoder.0 #1``, or ``outside every layer call``.
    peak_layer: str
    peak_operator: str
    parts: list[MemoryPart]
    top_outputs: list[MemoryCall]
    #: The KV cache the output keeps alive, when it holds one.
    output_cache: KeptCache | None = None


@dataclass(frozen=True)
class MemoryView:
    """A report's memory: the forward's (``crawl_module``) and the training step's, each when it was traced."""

    forward: ForwardMemory | None
    training: TrainingMemory | None
    #: How the trace ran when not on the model's own tensors: ``fake-tensor stand-ins of the model's tensors on
    #: meta`` (``as_device``), else empty.
    stand_ins: str = ""

    @property
    def device(self) -> str:
        """The device the trace ran on (the forward's, else the step's)."""
        traced = self.forward or self.training
        return traced.device if traced is not None else ""

    @property
    def kernel(self) -> str:
        """The attention kernel the trace assumed, with its reason."""
        traced = self.forward or self.training
        return traced.kernel if traced is not None else ""


def memory_view(report: dict[str, Any]) -> MemoryView | None:
    """The report's memory, or None when its analysis traced none: the forward's section is the report's
    ``memory``, a training step's is ``training.memory`` (``crawl_training_step(..., memory=True)``)."""
    section = report.get("memory")
    step = report.get("training", {}).get("memory")
    if section is None and step is None:
        return None
    return MemoryView(forward=None if section is None else forward_memory(section, report["layers"]),
                      training=training_memory(step, report["layers"]),
                      stand_ins=stand_ins_text(report["context"].get("stand_ins")))


def stand_ins_text(stand_ins: dict[str, Any] | None) -> str:
    """``context.stand_ins`` in words (empty without stand-ins): the trace's device is theirs, not the model's."""
    if stand_ins is None:
        return ""
    where = ", ".join(stand_ins["model_devices"]) or "no device (the model has no tensors)"
    return f"fake-tensor stand-ins of the model's tensors on {where}"


def forward_memory(section: dict[str, Any], layers: list[dict[str, Any]]) -> ForwardMemory:
    where = section["peak_at"]
    layer = where["layer"]
    return ForwardMemory(
        device=section["device"], kernel=kernel_text(section["attention_kernel"]),
        peak=metric_cell(section["peak"]), forward_peak=metric_cell(section["peak_above_start"]),
        activations=metric_cell(section["activations"]),
        peak_layer=("outside every layer call" if layer is None
                    else "layer call " + layer_label(layer["path"], layer["call_index"])),
        peak_operator=(NO_OPERATOR if where["operator"] is None
                       else f"{where['operator']} (operator #{where['operator_index']})"),
        parts=memory_parts(section["at_peak"], section["peak"], FORWARD_PARTS),
        top_outputs=top_outputs(layers),
        output_cache=kept_cache(section.get("output_cache")),
    )


def kept_cache(field: dict[str, Any] | None) -> KeptCache | None:
    """``memory.output_cache`` as a row beside the peak, or None without one."""
    if field is None:
        return None
    return KeptCache(field["cache_class"], metric_cell(field["at_peak"]), metric_cell(field["bytes"]))


def kernel_text(kernel: dict[str, str]) -> str:
    """``math (reason)``: the attention kernel the trace assumed and why."""
    return f"{kernel['name']} ({kernel['reason']})" if kernel.get("reason") else kernel["name"]


def memory_parts(at_peak: dict[str, Any], peak: dict[str, Any], parts: tuple[tuple[str, str], ...],
                 shown_when_present: frozenset[str] = frozenset()) -> list[MemoryPart]:
    """The categories live at the peak, each with its share of the peak (``—`` when either is not exact); those in
    ``shown_when_present`` are left out when they are an exact zero."""
    whole = peak["value"] if peak["status"] == "complete" else None
    rows = []
    for key, label in parts:
        result = at_peak.get(key)
        if result is None or (key in shown_when_present and _exact_zero(result)):
            continue
        exact = whole and result["status"] == "complete"
        rows.append(MemoryPart(key, label, metric_cell(result),
                               format_percent(100 * result["value"] / whole) if exact else "—"))
    return rows


def top_outputs(layers: list[dict[str, Any]]) -> list[MemoryCall]:
    """The `TOP_MEMORY_CALLS` layer calls with the largest outputs (ties in call order; the root and empty outputs
    left out: the root's output is the model's)."""
    sized = [layer for layer in layers if layer["path"] and counted(layer.get("memory", {}).get("output_bytes")) > 0]
    ranked = sorted(sized, key=lambda layer: -counted(layer["memory"]["output_bytes"]))
    return [MemoryCall(layer_label(layer["path"], layer["call_index"]), layer["type"].rpartition(".")[2],
                       metric_cell(layer["memory"]["output_bytes"])) for layer in ranked[:TOP_MEMORY_CALLS]]


def training_memory(section: dict[str, Any] | None, layers: list[dict[str, Any]]) -> TrainingMemory | None:
    """The training step's peak breakdown (the steady state's), what is resident at its start, the first step where
    it differs, and the calls that saved the most for backward; None without a traced step."""
    if section is None:
        return None
    types = {call_key(layer): layer["type"].rpartition(".")[2] for layer in layers}
    saved = sorted((item for item in section["saved_by_layer"] if counted(item["bytes"]) > 0),
                   key=lambda item: -counted(item["bytes"]))
    return TrainingMemory(
        device=section["device"], kernel=kernel_text(section["attention_kernel"]),
        peak=metric_cell(section["peak"]), phase=section["phase_at_peak"],
        operator=section["peak_operator"] or NO_OPERATOR,
        parts=memory_parts(section["at_peak"], section["peak"], TRAINING_PARTS, SHOWN_WHEN_PRESENT),
        top_saved=[MemoryCall(layer_label(item["path"], item["call_index"]),
                              types.get(call_key(item), ""), metric_cell(item["bytes"]))
                   for item in saved[:TOP_MEMORY_CALLS]],
        describes=section["describes"], zero_grad=section["zero_grad"],
        resident=memory_parts(section["resident_at_start"], section["peak"], RESIDENT_PARTS,
                              frozenset(key for key, _ in RESIDENT_PARTS)),
        first_step=first_step_memory(section))


def first_step_memory(section: dict[str, Any]) -> FirstStepMemory | None:
    """The first step's peak when it tells something the steady state's does not: a different peak or phase, or
    no figure at all (with the note that says why); None when the two steps peak alike."""
    first = section["first_step"]
    traced = first["phase_at_peak"] is not None
    if traced and first["peak"] == section["peak"] and first["phase_at_peak"] == section["phase_at_peak"]:
        return None
    return FirstStepMemory(
        peak=metric_cell(first["peak"]), phase=first["phase_at_peak"] or "",
        operator=(first["peak_operator"] or NO_OPERATOR) if traced else "",
        parts=memory_parts(first["at_peak"], first["peak"], TRAINING_PARTS, SHOWN_WHEN_PRESENT) if traced else [],
        note=first["note"])


def _exact_zero(result: dict[str, Any]) -> bool:
    """Whether a MetricResult is exactly zero (a lower bound or an unknown is never left out as one)."""
    return result["status"] == "complete" and result["value"] == 0
