"""One training step analyzed: the forward as ``crawl_module`` traces it, then the loss, the backward and an optional
optimizer step, with every backward operator filed under the layer call whose forward created its autograd node.

Attribution by creation (`GraphOwners`, which listens to the recorder's operators and subscribes to the tracer):
each autograd node belongs to the innermost layer call open when the forward created it, the loss's nodes to the
loss; a closing call also claims the nodes no operator created inside it (a custom autograd Function's). During the
backward each claimed node enters its owner's operator scope while it runs (node pre-hook and hook), so
the recorder files the node's operators there; everything else (``AccumulateGrad``, the engine's summing of
gradients for a tensor with several consumers) lands in the ``engine`` bucket, and the model's module calls re-run
during the backward (activation checkpointing) in the ``recomputation`` bucket.

State: the user's ``.grad`` tensors are set aside (the step accumulates into fresh ones) and put back, buffers
(BatchNorm running statistics) are copied before and restored after (one copy of the buffers, never of the
weights), the RNG state is forked, training flags and hooks are restored by the shared tracer path. The optimizer
step runs on ``meta`` stand-ins of the parameters and their gradients, so the weights never change and no second
copy of them is made; the stand-ins keep shapes and dtypes, not the device's choice of optimizer implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from ..calls.stand_ins import StandIns
from ..crawler import (
    Analysis,
    ForwardStep,
    analyze,
    check_flags,
    layer_keys,
    raise_if_incomplete,
    request,
    running,
)
from ..memory.forward import ForwardMemory
from ..memory.training_step import StepMemory
from ..operators import OperatorScope, build_formula_table, new_recorder
from ..parallel.plan import ParallelPlan, parse_plan
from ..parallel.step import sharded_step
from ..timing.profiled import time_training_step
from ..tracing import CallTracer, Finished, Frame
from ..values import tensors_in
from .loop import compute_loss, device_picks_foreach, optimizer_factory, settle_implementation
from .meta_elementwise import MetaElementwise
from .precision import Autocast, WeightCopies, caller_autocast, end_forward_region, outside_autocast, precision_section
from .section import LOSS, Owner, Phases, raise_if_training_incomplete, training_section

#: How the loop clears gradients between steps: ``optimizer.zero_grad(set_to_none=...)``.
ZERO_GRAD = ("set_to_none", "zeros")


def crawl_training_step(
    model: nn.Module,
    input_shape: Any = None,
    dtype: Any = None,
    *,
    args: tuple | list | None = None,
    kwargs: Mapping[str, Any] | None = None,
    device: torch.device | str | None = None,
    loss: Callable[[Any], torch.Tensor] | None = None,
    optimizer: str | Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None = None,
    zero_grad: str = "set_to_none",
    custom_modules: Mapping[type, Any] | None = None,
    custom_mapping: Mapping[Any, Any] | None = None,
    strict: bool = False,
    keep_modes: bool = False,
    memory: bool = False,
    as_device: torch.device | str | None = None, meta_kernels: str = "accelerator",
    parallel: Mapping[str, Any] | None = None, time: bool | Mapping[str, int] = False,
) -> dict[str, Any]:
    """One step of ``model``'s training loop: ``crawl_module``'s report of the (train-mode) forward plus ``training``.

    ``optimizer``: ``"sgd"``, ``"adam"``, ``"adamw"`` (the device's implementation) or ``params -> Optimizer``;
    ``zero_grad``: ``"set_to_none"`` or ``"zeros"``; ``memory=True``: the steady-state and first step's memory;
    ``parallel``: the step sharded by FSDP2 per device; ``time=True``: the step timed per layer call and phase
    (`torchscan.timing`). The module docstring and docs/api.md say the rest.
    """
    check_flags(model, strict=strict, keep_modes=keep_modes, memory=memory)
    make_optimizer, plan = _checked(loss, optimizer, zero_grad, parallel)
    step = TrainingForward(keep_modes, StepMemory(zero_grad) if memory else None, caller_autocast(),
                           zero_grad == "zeros")
    analysis = request(model, input_shape, dtype, args, kwargs, device, custom_modules, custom_mapping,
                       memory=memory, as_device=as_device, step=step, meta_kernels=meta_kernels, time=time)
    report, phases = _run_step(analysis, step, loss, make_optimizer)
    _add_sections(report, phases, analysis, loss, optimizer, make_optimizer, plan, zero_grad)
    if strict:
        raise_if_incomplete(report)
        raise_if_training_incomplete(report, phases)
    return report


def _add_sections(report: dict[str, Any], phases: Phases, analysis: Analysis, loss: Callable[[Any], Any] | None,
                  optimizer: Any, make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None,
                  plan: ParallelPlan | None, zero_grad: str) -> None:
    """The training section (with the sharded step when planned) and, when asked, the time section: each from runs
    of its own after the analysis, which none of them enters."""
    step = analysis.step
    assert isinstance(step, TrainingForward), "a training step's analysis"
    report["training"] = training_section(report, phases, analysis.mapping, optimizer, step.memory)
    if plan is not None and make_optimizer is not None:  # `_checked` requires the optimizer with a plan
        report["training"]["parallel"] = sharded_step(analysis.model, analysis.args, analysis.kwargs, loss,
                                                      make_optimizer, plan)
    if analysis.timing is not None:
        report["time"] = time_training_step(analysis, loss, make_optimizer, zero_grad, layer_keys(report))


def _run_step(analysis: Analysis, step: TrainingForward, loss: Callable[[Any], Any] | None,
              make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None
              ) -> tuple[dict[str, Any], Phases]:
    """The forward's report and the phases of the rest of the step (on stand-ins when asked); the model's state is
    put back and the step's memory timeline (if any) stops following storages, also when the step raises."""
    try:
        with preserved_state(analysis.model), running(analysis) as run:
            if step.keep_gradients:
                _zero_gradients(run.model)
            report = analyze(run)
            phases = run_after_forward(step, run.model, loss, make_optimizer, build_formula_table(analysis.mapping),
                                       default_foreach(run))
            trainable = _trainable(run.model)
            phases.precision = precision_section(step.autocast, trainable,
                                                 [p.grad for p in trainable if p.grad is not None], phases.state)
    finally:
        if step.memory is not None:
            step.memory.close()
    return report, phases


def _trainable(model: nn.Module) -> list[nn.Parameter]:
    return [parameter for parameter in model.parameters() if parameter.requires_grad]


def _zero_gradients(model: nn.Module) -> None:
    """Gradients a previous step left in place (``zero_grad(set_to_none=False)``), zeroed; resident from the start."""
    with torch.no_grad():
        for parameter in _trainable(model):
            parameter.grad = torch.zeros_like(parameter)


def default_foreach(analysis: Analysis) -> bool:
    """Whether the device the analysis stands for runs PyTorch's ``foreach`` optimizers by default
    (`torchscan.training.loop.device_picks_foreach`): its stand-ins' device, else the model's."""
    device = analysis.as_device or next((t.device for t in analysis.model.parameters()), torch.device("cpu"))
    return device_picks_foreach(device, analysis.meta_kernels)


def _checked(loss: Any, optimizer: Any, zero_grad: Any, parallel: Any
             ) -> tuple[Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None, ParallelPlan | None]:
    """The step's arguments checked before anything runs (errors name them): the optimizer and the parallel plan."""
    if loss is not None and not callable(loss):
        raise TypeError(f"loss must be a callable loss(output) -> scalar tensor, got {type(loss).__name__}")
    if zero_grad not in ZERO_GRAD:
        raise ValueError(f"zero_grad must be one of {', '.join(map(repr, ZERO_GRAD))}, got {zero_grad!r}")
    make_optimizer = optimizer_factory(optimizer)
    plan = None if parallel is None else parse_plan(parallel)
    if plan is not None and make_optimizer is None:
        raise ValueError("parallel needs an optimizer: pass optimizer='adamw' (or 'sgd', 'adam', or a callable)")
    return make_optimizer, plan


# -- the forward: train mode, gradients on, graph ownership ------------------------------------------------------------


class GraphOwners:
    """Which owner (layer call index or the loss) created each autograd node (see the module docstring). Autograd
    attaches an operator's node after dispatch returns, so each operator's nodes are claimed at the next event."""

    def __init__(self) -> None:
        self.owners: dict[Any, Owner] = {}
        self.stack: list[Frame] = []  # the tracer's open calls
        self.outside: Owner | None = None  # the owner of operators outside every call (the loss)
        self.pending: tuple[Any, Owner | None] | None = None  # the last operator's output and owner, unsettled

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        """An operator ran: settle the previous one, keep this one's output until its nodes exist."""
        self.settle()
        stack = self.stack
        self.pending = (out, stack[-1].index if stack and stack[-1].parts is not None else self.outside)

    def settle(self) -> None:
        """Claim the nodes the last operator created for the owner it ran under."""
        if self.pending is not None:
            out, owner = self.pending
            self.pending = None
            if owner is not None:
                self.claim(owner, out, ())

    def call_opened(self, frame: Frame) -> None:
        """Nothing to claim before the call returns."""

    def call_closed(self, frame: Frame, call: Finished | None) -> None:
        """A returned call claims the nodes no operator created inside it (a call that raised has none)."""
        self.settle()
        if call is not None:
            self.claim(frame.index, call.output, (call.args, call.kwargs))

    def claim(self, owner: Owner, outputs: Any, inputs: Any) -> None:
        """Claim for ``owner`` the unclaimed nodes reachable from ``outputs``: nodes that inner calls claimed, the
        nodes of ``inputs`` and ``AccumulateGrad`` (engine work) stop the walk."""
        boundary = {tensor.grad_fn for tensor in tensors_in(inputs) if tensor.grad_fn is not None}
        owners = self.owners
        todo = [tensor.grad_fn for tensor in tensors_in(outputs) if tensor.grad_fn is not None]
        while todo:
            node = todo.pop()
            if node in owners or node in boundary or type(node).__name__ == "AccumulateGrad":
                continue
            owners[node] = owner
            todo.extend(parent for parent, _ in node.next_functions if parent is not None)


class TrainingForward(ForwardStep):
    """The forward of a training step: train mode (unless kept), gradients on, autograd nodes claimed per call."""

    def __init__(self, keep_modes: bool, memory: StepMemory | None = None, autocast: Autocast = (),
                 keep_gradients: bool = False) -> None:
        self.keep_modes = keep_modes
        self.memory = memory  # the step's traced memory, when requested
        self.autocast = autocast  # the caller's autocast regions (`torchscan.training.precision`)
        self.keep_gradients = keep_gradients  # the loop zeroes gradients in place: they are resident from the start
        self.graph = GraphOwners()
        self.output: Any = None
        self.tracer: CallTracer | None = None  # the forward's tracer, replayed through the backward
        self.stand_ins: StandIns | None = None  # the step runs on fake-tensor stand-ins (`torchscan.calls.stand_ins`)

    def execution(self) -> dict[str, Any]:
        return {"mode": "kept" if self.keep_modes else "train", "grad": "enabled", "forward_passes": 1}

    def set_modes(self, model: nn.Module, training_flags: list[tuple[nn.Module, bool]]) -> None:
        if not self.keep_modes:
            model.train()

    def grad_mode(self) -> Any:
        return torch.enable_grad()

    continues_trace = True

    def forward(self, analysis: Analysis, tracer: CallTracer, probe: ForwardMemory | None) -> Any:
        """The forward, each closing call claiming its autograd nodes (the step's memory continues ``probe``)."""
        self.tracer = tracer
        self.stand_ins = analysis.stand_ins
        if self.memory is not None:
            self.memory.start(probe, analysis.model if self.keep_gradients else None)
        self.graph.stack = tracer.stack
        with tracer.subscribed(self.graph), self.observing(tracer.counting):
            self.output = analysis.model(*analysis.args, **analysis.kwargs)
        self.graph.settle()
        return self.output

    @contextmanager
    def observing(self, recorder: Any) -> Iterator[None]:
        """What the forward and the loss are observed with: graph ownership by creation, and, when memory is traced,
        autograd's saved tensors and autocast's weight copies."""
        with recorder.listening(self.graph), ExitStack() as stack:
            if self.memory is not None:
                stack.enter_context(self.memory.saving())
                if self.autocast:
                    stack.enter_context(recorder.listening(WeightCopies(self.memory.timeline)))
            yield

    def device_queries(self) -> Any:
        """Entered above each recorder of the step on stand-ins (`torchscan.calls.stand_ins.DeviceQueries`)."""
        return nullcontext() if self.stand_ins is None else self.stand_ins.device_queries()


# -- after the forward: loss, backward, optimizer --------------------------------------------------------------------


def run_after_forward(step: TrainingForward, model: nn.Module, loss: Callable[[Any], Any] | None,
                      make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None,
                      formulas: Mapping[Any, Any], foreach: bool = False) -> Phases:
    """Run the loss, the backward and the optimizer step under a recorder of their own (the backward and the
    optimizer outside the caller's autocast); as in a loop that keeps the loss, the output is dropped once the loss
    is computed and the loss lives until the step ends."""
    phases = Phases(new_recorder(formulas))
    recorder = phases.recorder
    phases.loss_default = loss is None
    memory = step.memory
    graph = step.graph
    with torch.enable_grad(), recorder, step.device_queries(), recorder.listening(None if memory is None else memory.probe):
        recorder.enter(phases.loss_forward)
        graph.outside = LOSS
        with step.observing(recorder):
            value = compute_loss(loss, step.output)
        graph.settle()
        recorder.leave()
        end_forward_region(step.autocast)
        graph.claim(LOSS, value, step.output)
        step.output = None  # a loop keeps the loss, not the output (what autograd saved of it lives on)
        _hook_nodes(graph, phases)
        recorder.enter(phases.engine)
        if memory is not None:
            memory.backward_starts()
        tracer = step.tracer
        assert tracer is not None, "the forward ran"
        with outside_autocast(step.autocast), tracer.replaying(), tracer.subscribed(Recomputation(phases)):
            value.backward()
        recorder.leave()
    graph.owners.clear()
    if memory is not None:
        memory.backward_ended(model)
    if make_optimizer is not None:
        with outside_autocast(step.autocast):
            _optimizer_step(model, make_optimizer, phases, memory, step.device_queries, foreach)
    return phases


class Recomputation:
    """While the backward runs, the model's calls (forwards recomputed under ``torch.utils.checkpoint``) count into
    the recomputation bucket, whichever node triggered them; subscribed to the replaying tracer."""

    def __init__(self, phases: Phases) -> None:
        self.phases = phases

    def call_opened(self, frame: Frame) -> None:
        self.phases.recorder.enter(self.phases.recomputation)

    def call_closed(self, frame: Frame, call: Finished | None) -> None:
        self.phases.recorder.leave()


def _hook_nodes(graph: GraphOwners, phases: Phases) -> None:
    """Each claimed node enters its owner's backward scope while it runs (the hooks die with the graph)."""
    recorder = phases.recorder

    def leave(grad_inputs: Any, grad_outputs: Any) -> None:
        recorder.leave()

    for node, owner in graph.owners.items():
        scope = phases.backward.setdefault(owner, OperatorScope())
        node.register_prehook(lambda grad_outputs, scope=scope: recorder.enter(scope))
        node.register_hook(leave)


def _optimizer_step(model: nn.Module, make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
                    phases: Phases, memory: StepMemory | None, device_queries: Callable[[], Any], foreach: bool
                    ) -> None:
    """Two optimizer steps over ``meta`` stand-ins of the trainable parameters and their new gradients: the first
    step, which creates the optimizer's state, and a steady-state step, where the state exists; the FLOPs counted
    are the steady step's. Each is traced on a timeline of its own when memory is (the stand-ins have the bytes of
    what they stand for)."""
    stand_ins = []
    for parameter in _trainable(model):
        stand_in = torch.empty_like(parameter, device="meta").requires_grad_()
        if parameter.grad is not None:
            stand_in.grad = torch.empty_like(parameter.grad, device="meta")
        stand_ins.append(stand_in)
    optimizer = make_optimizer(stand_ins)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must build a torch.optim.Optimizer, got {type(optimizer).__name__}")
    phases.optimizer_type = f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"
    phases.optimizer_implementation = settle_implementation(optimizer, foreach)
    recorder = phases.recorder
    elementwise = MetaElementwise()  # one for both steps: the second repeats the first's signatures
    for scope, first in ((OperatorScope(), True), (phases.optimizer, False)):  # the first step's FLOPs not counted
        if first and memory is None:  # only its memory is reported: it just creates the state, unobserved
            with elementwise:
                optimizer.step()
            continue
        timeline = None if memory is None else memory.optimizer_timeline(optimizer, first)
        with elementwise, recorder, device_queries(), recorder.listening(timeline):
            recorder.enter(scope)
            optimizer.step()
            recorder.leave()
        if memory is not None:
            memory.optimizer_ended(optimizer, first)
    phases.state = [tensor for state in optimizer.state.values() for tensor in tensors_in(state)]


# -- state -----------------------------------------------------------------------------------------------------------


@contextmanager
def preserved_state(model: nn.Module) -> Iterator[None]:
    """Gradients set aside, buffers copied, RNG forked for the step; all put back, also after an error."""
    lazy = [name for name, buffer in model.named_buffers() if isinstance(buffer, nn.parameter.UninitializedBuffer)]
    if lazy:
        raise ValueError(f"model has uninitialized lazy buffers ({', '.join(lazy)}) whose values a training step would "
                         "set: run one forward (or crawl_module) to materialize them first")
    parameters = list(model.parameters())
    grads = [parameter.grad for parameter in parameters]
    buffers = [(buffer, buffer.clone()) for buffer in model.buffers()]
    devices = sorted({t.device.index or 0 for t in parameters if t.device.type == "cuda"})
    try:
        for parameter in parameters:
            parameter.grad = None
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        with torch.no_grad():
            for buffer, saved in buffers:
                buffer.copy_(saved)
        for parameter, grad in zip(parameters, grads, strict=True):
            parameter.grad = grad
