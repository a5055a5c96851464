"""The memory of a training step: the forward's traced timeline continued through the loss, the backward and the
optimizer step, broken down at the peak into parameters, gradients, optimizer state, saved activations and
temporaries.

`StepMemory` takes over the forward's `ForwardMemory` probe (the crawler hands it over instead of closing it), so
the backward's operators extend the same timeline. Tensors that autograd saves for the backward are seen through
``saved_tensors_hooks`` while the forward and the loss run: a storage created by the step and saved is filed under
``saved_activations`` once (views and shared storages too) and attributed to the layer call open when it was saved;
activation checkpointing installs hooks of its own inside its blocks, so what it does not keep is never seen as
saved. Gradients and optimizer state are labelled when they exist (categories split what is live at every point,
never the level). The optimizer step runs on ``meta`` stand-ins (`torchscan.training.step`), so it is traced on a
timeline of its own and added to what was live when the backward ended.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import nn

from ..results import MODEL, MODULE_CALL, unavailable
from ..tracing import open_call
from ..values import tensors_in
from ..wire import call_key
from .forward import (
    BUFFERS,
    INPUTS,
    METHOD,
    PARAMETERS,
    ForwardMemory,
    tensor_bytes,
    traced_bytes,
)
from .timeline import CREATED, PRE_EXISTING, MemoryTimeline, operator_label

SAVED, GRADIENTS, OPTIMIZER_STATE = "saved_activations", "gradients", "optimizer_state"
#: The memory category of autocast's cached low-precision copies of the weights (`torchscan.training.precision`).
WEIGHT_COPIES = "autocast_weight_copies"
FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
FIRST_STEP_NOTE = "the first step of a loop: the optimizer creates its state in its step"
FIRST_STEP_NOT_TRACED = ("not traced: with zero_grad='zeros' the traced backward accumulates into gradients resident "
                         "from the start, which a first step does not have yet")


class StepMemory:
    """The traced memory of one training step, fed by the forward's probe and then by the step's recorder.

    The forward, the loss and the backward are traced once; what the optimizer's state adds to them in the steady
    state is constant through them (the state is not touched until the optimizer step), so the steady-state step's
    levels there are the traced ones plus the state's bytes. The optimizer runs twice on its stand-ins, each step on
    a timeline of its own: the first step creates the state, the second finds it resident.
    """

    def __init__(self, zero_grad: str = "set_to_none") -> None:
        self.probe: ForwardMemory | None = None
        self.zero_grad = zero_grad
        self.saved_by: dict[tuple[str, int], int] = {}  # (path, call_index) -> bytes saved, in first-saved order
        self.backward_from: int | None = None  # the first operator index of the backward
        self.before_optimizer: dict[str, int] | None = None  # live bytes by category when the optimizer started
        self.optimizer_steps: dict[bool, MemoryTimeline] = {}  # first step? -> its timeline
        self.state_bytes = 0  # the optimizer's state after its first step: resident through every later step
        self.kept_gradients = 0  # gradients resident from the start (``zero_grad="zeros"``)

    @property
    def timeline(self) -> MemoryTimeline:
        assert self.probe is not None, "the forward's probe is handed over before the step runs"
        return self.probe.timeline

    def start(self, probe: ForwardMemory | None, kept_from: nn.Module | None) -> None:
        """Take over the forward's probe; gradients a previous step left (``kept_from``'s) are resident."""
        self.probe = probe
        if probe is not None and kept_from is not None:
            gradients = [p.grad for p in kept_from.parameters() if p.grad is not None]
            probe.adopt(gradients, GRADIENTS)
            self.kept_gradients = sum(tensor_bytes(gradient) for gradient in gradients)

    def saving(self) -> Any:
        """The context in which autograd's saved tensors are noted (the forward and the loss)."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        """A tensor saved for the backward: its storage, if the step created it, is a saved activation (once)."""
        record = self.timeline.followed(tensor)
        if record is not None and record.category == CREATED:
            record.category = SAVED
            call = open_call(self.probe.stack) if self.probe is not None else None
            if call is not None:
                owner = call_key(call)
                self.saved_by[owner] = self.saved_by.get(owner, 0) + record.nbytes
        return tensor

    def backward_starts(self) -> None:
        self.backward_from = len(self.timeline.operators)

    def backward_ended(self, model: nn.Module) -> None:
        """Label the gradients and note what is live now, where the optimizer step starts."""
        timeline = self.timeline
        for parameter in model.parameters():
            if parameter.grad is not None:
                timeline.label(parameter.grad, GRADIENTS)
        self.before_optimizer = timeline.live_at(len(timeline.operators))

    def optimizer_timeline(self, optimizer: torch.optim.Optimizer, first: bool) -> MemoryTimeline:
        """The timeline of one optimizer step (its parameters and gradients are stand-ins: they pre-exist; in the
        steady step, so does the state the first step created)."""
        timeline = self.optimizer_steps[first] = MemoryTimeline(None)
        if not first:
            for state in optimizer.state.values():
                for tensor in tensors_in(state):
                    timeline.adopt(tensor, OPTIMIZER_STATE)
        return timeline

    def optimizer_ended(self, optimizer: torch.optim.Optimizer, first: bool) -> None:
        """File the optimizer's state under its category; after the first step, note its bytes."""
        timeline = self.optimizer_steps.get(first)
        if timeline is None:
            return
        state = [tensor for entry in optimizer.state.values() for tensor in tensors_in(entry)]
        for tensor in state:
            timeline.label(tensor, OPTIMIZER_STATE)
        if first:
            self.state_bytes = sum(tensor_bytes(tensor) for tensor in unique_storages(state))

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()
        for timeline in self.optimizer_steps.values():
            timeline.close()


def unique_storages(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """One tensor per storage (views of one state buffer are counted once)."""
    seen: dict[int, torch.Tensor] = {}
    for tensor in tensors:
        seen.setdefault(id(tensor.untyped_storage()), tensor)
    return list(seen.values())


def _categories(live: dict[str, int]) -> dict[str, int]:
    """Live bytes by category as the report's ``at_peak``; ``buffers``, added to the contract's six, holds the
    buffers and any other tensor that existed before the step."""
    return {PARAMETERS: live.get(PARAMETERS, 0), GRADIENTS: live.get(GRADIENTS, 0),
            OPTIMIZER_STATE: live.get(OPTIMIZER_STATE, 0), SAVED: live.get(SAVED, 0),
            "temporaries": live.get(CREATED, 0), WEIGHT_COPIES: live.get(WEIGHT_COPIES, 0), INPUTS: live.get(INPUTS, 0),
            BUFFERS: live.get(BUFFERS, 0) + live.get(PRE_EXISTING, 0)}


class StepPeak(NamedTuple):
    """One step's peak: live bytes by category, the phase and the operator at the peak."""

    live: dict[str, int]
    phase: str
    operator: str | None


def _step_peak(memory: StepMemory, first: bool) -> StepPeak:
    """The peak of the first or of the steady-state step: the traced forward and backward (with the optimizer's
    state resident in the steady state) against the optimizer step added to what was live when it started."""
    timeline = memory.timeline
    at = -1 if timeline.peak_index is None else timeline.peak_index
    traced = timeline.live_at(at)
    if not first:
        traced[OPTIMIZER_STATE] = traced.get(OPTIMIZER_STATE, 0) + memory.state_bytes
    phase = BACKWARD if memory.backward_from is not None and at >= memory.backward_from else FORWARD
    peak = StepPeak(_categories(traced), phase, operator_label(timeline.operators[at]) if timeline.operators else None)
    optimizer, before = memory.optimizer_steps.get(first), memory.before_optimizer
    if optimizer is not None and before is not None and optimizer.peak_index is not None:
        added = optimizer.live_at(optimizer.peak_index)
        during = _categories({**before, OPTIMIZER_STATE: added.get(OPTIMIZER_STATE, 0),
                              CREATED: before.get(CREATED, 0) + added.get(CREATED, 0)})
        if sum(during.values()) > sum(peak.live.values()):
            return StepPeak(during, OPTIMIZER, operator_label(optimizer.operators[optimizer.peak_index]))
    return peak


def _peak_fields(peak: StepPeak, partial: bool) -> dict[str, Any]:
    return {"peak": traced_bytes(sum(peak.live.values()), partial), "phase_at_peak": peak.phase,
            "at_peak": {name: traced_bytes(value, partial) for name, value in peak.live.items()},
            "peak_operator": peak.operator}


def _first_step(memory: StepMemory, partial: bool) -> dict[str, Any]:
    """The first step's peak, where the optimizer creates its state; not traced when gradients are kept (the traced
    backward accumulated into resident gradients, which a first step does not have)."""
    if memory.zero_grad == "zeros":
        return {"peak": unavailable("bytes", MODEL, METHOD), "phase_at_peak": None, "at_peak": None,
                "peak_operator": None, "note": FIRST_STEP_NOT_TRACED}
    return {**_peak_fields(_step_peak(memory, True), partial), "note": FIRST_STEP_NOTE}


def step_memory_section(memory: StepMemory) -> dict[str, Any]:
    """The training section's ``memory``: the steady-state step's peak (its phase, operator and breakdown), the first
    step's, what a previous step leaves resident, and the bytes each layer call saved for the backward."""
    probe = memory.probe
    assert probe is not None
    partial = memory.timeline.untracked > 0 or any(timeline.untracked for timeline in memory.optimizer_steps.values())
    return {
        "method": METHOD,
        "device": str(probe.device),
        "attention_kernel": probe.attention_kernel(),
        "describes": "steady_state",
        **_peak_fields(_step_peak(memory, False), partial),
        "first_step": _first_step(memory, partial),
        "resident_at_start": {OPTIMIZER_STATE: traced_bytes(memory.state_bytes, partial),
                              GRADIENTS: traced_bytes(memory.kept_gradients, partial)},
        "zero_grad": memory.zero_grad,
        "saved_by_layer": [{"path": path, "call_index": index, "bytes": traced_bytes(value, False, MODULE_CALL)}
                           for (path, index), value in memory.saved_by.items()],
        **probe.stand_ins_field(),
    }
