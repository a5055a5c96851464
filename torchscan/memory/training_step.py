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

from typing import Any

import torch
from torch import nn

from ..results import MODULE_CALL
from ..tracing import open_call
from ..values import tensors_in
from ..wire import call_key
from .forward import (
    BUFFERS,
    INPUTS,
    METHOD,
    PARAMETERS,
    ForwardMemory,
    traced_bytes,
)
from .timeline import CREATED, PRE_EXISTING, MemoryTimeline, operator_label

SAVED, GRADIENTS, OPTIMIZER_STATE = "saved_activations", "gradients", "optimizer_state"
FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


class StepMemory:
    """The traced memory of one training step, fed by the forward's probe and then by the step's recorder."""

    def __init__(self) -> None:
        self.probe: ForwardMemory | None = None
        self.saved_by: dict[tuple[str, int], int] = {}  # (path, call_index) -> bytes saved, in first-saved order
        self.backward_from: int | None = None  # the first operator index of the backward
        self.before_optimizer: dict[str, int] | None = None  # live bytes by category when the optimizer started
        self.optimizer: MemoryTimeline | None = None

    @property
    def timeline(self) -> MemoryTimeline:
        assert self.probe is not None, "the forward's probe is handed over before the step runs"
        return self.probe.timeline

    def saving(self) -> Any:
        """The context in which autograd's saved tensors are noted (the forward and the loss)."""
        return torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)

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

    def optimizer_timeline(self) -> MemoryTimeline:
        """The timeline of the optimizer step (its parameters and gradients are stand-ins: they pre-exist)."""
        self.optimizer = MemoryTimeline(None)
        return self.optimizer

    def optimizer_ended(self, optimizer: torch.optim.Optimizer) -> None:
        """File the optimizer's state under its category."""
        if self.optimizer is None:
            return
        for state in optimizer.state.values():
            for tensor in tensors_in(state):
                self.optimizer.label(tensor, OPTIMIZER_STATE)

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()
        if self.optimizer is not None:
            self.optimizer.close()


def _categories(live: dict[str, int]) -> dict[str, int]:
    """Live bytes by category as the report's ``at_peak``; ``buffers``, added to the contract's six, holds the
    buffers and any other tensor that existed before the step."""
    return {PARAMETERS: live.get(PARAMETERS, 0), GRADIENTS: live.get(GRADIENTS, 0), OPTIMIZER_STATE: live.get(OPTIMIZER_STATE, 0),
            SAVED: live.get(SAVED, 0), "temporaries": live.get(CREATED, 0), INPUTS: live.get(INPUTS, 0),
            BUFFERS: live.get(BUFFERS, 0) + live.get(PRE_EXISTING, 0)}


def _step_peak(memory: StepMemory) -> tuple[dict[str, int], str, str | None]:
    """What is live at the step's peak by category, the phase and the operator of the peak."""
    timeline = memory.timeline
    at = -1 if timeline.peak_index is None else timeline.peak_index
    live = _categories(timeline.live_at(at))
    phase = BACKWARD if memory.backward_from is not None and at >= memory.backward_from else FORWARD
    operator = operator_label(timeline.operators[at]) if timeline.operators else None
    optimizer, before = memory.optimizer, memory.before_optimizer
    if optimizer is not None and before is not None and optimizer.peak_index is not None:
        added = optimizer.live_at(optimizer.peak_index)
        during = _categories({**before, OPTIMIZER_STATE: added.get(OPTIMIZER_STATE, 0),
                              CREATED: before.get(CREATED, 0) + added.get(CREATED, 0)})
        if sum(during.values()) > sum(live.values()):
            return during, OPTIMIZER, operator_label(optimizer.operators[optimizer.peak_index])
    return live, phase, operator


def step_memory_section(memory: StepMemory) -> dict[str, Any]:
    """The training section's ``memory``: the step's peak, its phase and operator, the breakdown at the peak and
    the bytes each layer call saved for the backward."""
    probe = memory.probe
    assert probe is not None
    partial = memory.timeline.untracked > 0 or bool(memory.optimizer and memory.optimizer.untracked)
    live, phase, operator = _step_peak(memory)
    return {
        "method": METHOD,
        "device": str(probe.device),
        "attention_kernel": probe.attention_kernel(),
        "peak": traced_bytes(sum(live.values()), partial),
        "phase_at_peak": phase,
        "at_peak": {name: traced_bytes(value, partial) for name, value in live.items()},
        "saved_by_layer": [{"path": path, "call_index": index, "bytes": traced_bytes(value, False, MODULE_CALL)}
                           for (path, index), value in memory.saved_by.items()],
        "peak_operator": operator,
        **probe.stand_ins_field(),
    }


def add_step_memory(section: dict[str, Any], memory: StepMemory) -> None:
    """Add ``memory`` and the ``training_peak_bytes`` total to a training section."""
    section["memory"] = step_memory_section(memory)
    section["totals"]["training_peak_bytes"] = dict(section["memory"]["peak"])
