"""``sharded_step``: the per-device memory of one data-parallel training step, traced on one rank of a fake world.

What runs: PyTorch's FSDP2 (``fully_shard``) on a copy of the model whose tensors are fake-tensor stand-ins, joined
to a fake process group of the plan's world size (`torchscan.parallel.fake_world`), driving the loop's own
iteration (`loop_step`: forward, loss, backward, ``optimizer.step()``, ``optimizer.zero_grad()``) with the
caller's optimizer. The step runs twice, as a loop runs it: the first step, in which the optimizer creates its
state, and then the steady-state step, with the state resident from its start. Each is traced on one rank
(`torchscan.parallel.memory.RankTimeline`): every byte the rank holds, above and at the step's start.

What is fake: the tensors (their storages are ``meta``: nothing is allocated, so a 70B model's step is traced on a
laptop; kernels are chosen as on the stand-ins' device, CPU) and the collectives (they move no data; each rank's
buffers are the real rank's). Everything else, the sharding, the padding, the buffers FSDP2 allocates, frees and
keeps, its prefetching, the mixed-precision casts and the optimizer, is PyTorch's own code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..calls.stand_ins import StandIns
from ..memory.forward import traced_bytes
from ..memory.timeline import METHOD, TraceMode, operator_label
from ..training.loop import compute_loss, device_picks_foreach, implementation, optimizer_factory, settle_implementation
from ..values import tensors_in
from .collectives import CollectiveLog, collective_formula, collectives_section
from .fake_world import FakeWorld, fake_world
from .flops import RankFlops
from .memory import (
    BUFFERS,
    INPUTS,
    OPTIMIZER_STATE,
    SHARDED_PARAMETERS,
    Labels,
    RankTimeline,
    live_by_category,
    resizes,
)
from .plan import ParallelPlan, parse_plan
from .sharding import shard, stand_in_copy, trainable

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
#: The device the stand-ins stand for (the fake world's mesh device).
STAND_IN_DEVICE = torch.device("cpu")
NOT_MODELLED = ("the communication library's own buffers (NCCL channels and its workspace), allocator caching and "
                "fragmentation, kernel workspaces, CUDA context; tensor, pipeline, context and expert parallelism")
Optimizer = Callable[[list[torch.Tensor]], torch.optim.Optimizer]


class StepObserver:
    """What `loop_step` tells as it goes: the phase it enters and the end of the backward. This base observes
    nothing (a measured step)."""

    def phase(self, name: str) -> None:
        """The step enters ``name`` (forward, backward, optimizer)."""

    def backward_ended(self) -> None:
        """The backward returned: the gradients are in place."""

    def optimizer_ended(self) -> None:
        """The optimizer stepped (before ``zero_grad``)."""


def loop_step(model: nn.Module, args: tuple, kwargs: Mapping[str, Any], loss: Callable[[Any], Any] | None,
              optimizer: torch.optim.Optimizer, observer: StepObserver | None = None) -> None:
    """One iteration of a training loop: forward, loss, backward, optimizer step, ``zero_grad()`` (set to None).

    As in `torchscan.crawl_training_step`, the output is dropped once the loss is computed and the loss lives until
    the iteration ends (a loop that keeps the loss). ``loss(output)`` returns a scalar (default: the sum of every
    floating output tensor).
    """
    observer = observer or StepObserver()
    observer.phase(FORWARD)
    value = compute_loss(loss, model(*args, **kwargs))
    observer.phase(BACKWARD)
    value.backward()
    observer.backward_ended()
    observer.phase(OPTIMIZER)
    optimizer.step()
    observer.optimizer_ended()
    optimizer.zero_grad()


@dataclass
class RankStep(StepObserver):
    """One traced step on one rank: its timeline, the labels, the collectives and where each phase started."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    timeline: RankTimeline = field(default_factory=lambda: RankTimeline(None))
    collectives: CollectiveLog = field(default_factory=CollectiveLog)
    flops: RankFlops = field(default_factory=RankFlops)
    starts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.labels = Labels(self.timeline)

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        """Each dispatched operator: the timeline first (it follows the storages), then the labels and the log."""
        self.timeline.record(func, args, kwargs, out)
        self.labels.record(func, args, kwargs, out)
        self.collectives.record(func, args, kwargs, out)
        self.flops.record(func, args, kwargs, out)

    def phase(self, name: str) -> None:
        self.starts[name] = len(self.timeline.operators)
        self.flops.phase = name

    def backward_ended(self) -> None:
        self.labels.gradients(trainable(self.model))

    def optimizer_ended(self) -> None:
        for tensor in tensors_in(list(self.optimizer.state.values())):
            self.timeline.label(tensor, OPTIMIZER_STATE)

    def adopt_start(self, args: tuple, kwargs: Mapping[str, Any]) -> None:
        """What exists at the step's start: the parameter shards, buffers, inputs and the optimizer's state."""
        for category, tensors in ((SHARDED_PARAMETERS, list(self.model.parameters())),
                                  (BUFFERS, list(self.model.buffers())), (INPUTS, tensors_in((args, kwargs))),
                                  (OPTIMIZER_STATE, tensors_in(list(self.optimizer.state.values())))):
            for tensor in tensors:
                self.timeline.adopt(tensor, category)

    def phase_at(self, index: int) -> str | None:
        """The phase the operator ``index`` ran in (None before the first)."""
        started = [name for name, start in sorted(self.starts.items(), key=lambda item: item[1]) if start <= index]
        return started[-1] if started else None


def traced_step(model: nn.Module, args: tuple, kwargs: Mapping[str, Any], loss: Callable[[Any], Any] | None,
                optimizer: torch.optim.Optimizer, stand_ins: StandIns) -> RankStep:
    """Run `loop_step` once on the sharded stand-in model, traced on this rank (storage resizes and autograd's saved
    tensors included); the timeline stops following storages afterwards, also when the step raises."""
    step = RankStep(model, optimizer)
    step.adopt_start(args, kwargs)
    try:
        with TraceMode(step), stand_ins.device_queries(), resizes(step.timeline.storage_resized), \
                step.labels.saving():
            loop_step(model, args, kwargs, loss, optimizer, step)
    finally:
        step.timeline.close()
    return step


def peak_section(step: RankStep) -> dict[str, Any]:
    """One step's peak on the rank: every byte live at the peak (the bytes at the start plus the peak above it),
    broken down, with the phase and the operator at the peak."""
    timeline = step.timeline
    partial = timeline.untracked > 0
    at = -1 if timeline.peak_index is None else timeline.peak_index
    live = live_by_category(timeline.live_at(at))
    start = live_by_category(timeline.live_at(-1))
    return {
        "peak": traced_bytes(sum(live.values()), partial),
        "peak_above_start": traced_bytes(timeline.peak, partial),
        "at_start": {name: traced_bytes(value, partial) for name, value in start.items()},
        "at_peak": {name: traced_bytes(value, partial) for name, value in live.items()},
        "phase_at_peak": step.phase_at(at),
        "peak_operator": operator_label(timeline.operators[at]) if timeline.peak_index is not None else None,
        "operators": len(timeline.operators),
        "untracked_outputs": timeline.untracked,
    }


def sharded_step(model: nn.Module, args: tuple | list = (), kwargs: Mapping[str, Any] | None = None,
                 loss: Callable[[Any], Any] | None = None, make_optimizer: str | Optimizer = "adamw",
                 plan: ParallelPlan | Mapping[str, Any] | None = None, activation_checkpointing: bool = False,
                 *, rank: int | None = None) -> dict[str, Any]:
    """The per-device memory of one training step of ``model`` under ``plan``, on one rank of a fake world.

    ``args`` and ``kwargs`` are one rank's batch (each rank gets the same shapes); ``loss(output)`` returns the
    scalar to differentiate (default: the sum of every floating output tensor); ``make_optimizer`` builds the
    optimizer from the sharded parameters (``"sgd"``, ``"adam"``, ``"adamw"`` as `torchscan.crawl_training_step`
    names them, or a callable); ``plan`` is a `ParallelPlan` or the mapping `parse_plan` reads;
    ``activation_checkpointing`` recomputes each unit's forward in the backward. ``rank`` picks the analyzed rank
    (default: the one whose shards are the largest, `torchscan.parallel.fake_world.LARGEST_RANK`).

    Returns a dict whose ``per_device`` holds the steady-state step's ``peak`` (a MetricResult in bytes of every
    byte live on the device at its peak: the bytes at the step's start plus the peak above it, method
    ``traced_live_tensor_bytes``), ``peak_above_start``, ``at_start`` and ``at_peak`` by category, the phase and the
    operator at the peak, and ``first_step`` (the same for the step that creates the optimizer's state);
    ``collectives`` holds the bytes per step of each collective, observed and from the plan's formula. The user's
    model, the process-group state and the default device are as they were afterwards, also after an error.
    """
    if plan is None:
        raise ValueError("sharded_step needs a plan: a ParallelPlan or a mapping such as "
                         "{'strategy': 'fsdp', 'world_size': 8}")
    checked = parse_plan(plan)
    activation_checkpointing = activation_checkpointing or checked.activation_checkpointing
    factory = optimizer_factory(make_optimizer)
    if factory is None:
        raise ValueError("a sharded step needs an optimizer: 'sgd', 'adam', 'adamw' or a callable params -> "
                         "torch.optim.Optimizer")
    call_kwargs = dict(kwargs or {})
    formula = collective_formula(model, checked)
    with torch.random.fork_rng(devices=[]), fake_world(checked, rank) as world:
        stand_ins = StandIns(STAND_IN_DEVICE, sorted({str(t.device) for t in (*model.parameters(),
                                                                                *model.buffers())}))
        copy = stand_in_copy(model, stand_ins).train()
        with stand_ins.mode:
            first, steady, units = _run(copy, world, stand_ins, tuple(args), call_kwargs, loss, factory,
                                        activation_checkpointing, _accelerator(model))
    return _section(world, stand_ins, first, steady, units, formula, activation_checkpointing)


def _run(model: nn.Module, world: FakeWorld, stand_ins: StandIns, args: tuple, kwargs: dict[str, Any],
         loss: Callable[[Any], Any] | None, factory: Optimizer, activation_checkpointing: bool, foreach: bool
         ) -> tuple[RankStep, RankStep, list[str]]:
    """Shard the stand-in model, build the optimizer, and trace the first and the steady-state step."""
    units = shard(model, world, activation_checkpointing)
    optimizer = factory(list(trainable(model)))
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"make_optimizer must build a torch.optim.Optimizer, got {type(optimizer).__name__}")
    settle_implementation(optimizer, foreach)
    with stand_ins.call(args, kwargs) as (batch, named):
        first = traced_step(model, batch, named, loss, optimizer, stand_ins)
        steady = traced_step(model, batch, named, loss, optimizer, stand_ins)
    return first, steady, units


def _accelerator(model: nn.Module) -> bool:
    """Whether the model stands for an accelerator run (on meta or on an accelerator): its named optimizer then runs
    the ``foreach`` implementation (`torchscan.training.loop.device_picks_foreach`)."""
    return any(device_picks_foreach(parameter.device) for parameter in model.parameters())


def _section(world: FakeWorld, stand_ins: StandIns, first: RankStep, steady: RankStep, units: list[str],
             formula: dict[str, dict[str, int]], activation_checkpointing: bool) -> dict[str, Any]:
    optimizer = type(steady.optimizer)
    return {
        "method": METHOD,
        "plan": world.plan.describe(),
        "rank": world.rank,
        "stand_ins": stand_ins.record(),
        "units": {"count": len(units), "types": sorted(set(units))},
        "activation_checkpointing": activation_checkpointing,
        "optimizer": f"{optimizer.__module__}.{optimizer.__qualname__}",
        "optimizer_implementation": implementation(steady.optimizer),
        "describes": "steady_state",
        "per_device": {**peak_section(steady), "flops": steady.flops.section(), "first_step": peak_section(first)},
        "collectives": collectives_section(steady.collectives, formula, world.plan),
        "not_modelled": NOT_MODELLED,
    }
