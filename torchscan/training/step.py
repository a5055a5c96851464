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
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch import nn

from ..calls.stand_ins import StandIns
from ..crawler import Analysis, ForwardStep, analyze, check_flags, raise_if_incomplete, request, running
from ..memory.forward import ForwardMemory
from ..memory.training_step import StepMemory, add_step_memory
from ..operators import build_formula_table, new_recorder
from ..tracing import CallTracer, Finished, Frame
from ..values import tensors_in
from .section import LOSS, Owner, Phases, raise_if_training_incomplete, training_section

OPTIMIZERS: dict[str, Callable[[list[torch.Tensor]], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "adam": lambda params: torch.optim.Adam(params),
    "adamw": lambda params: torch.optim.AdamW(params),
}


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
    custom_modules: Mapping[type, Any] | None = None,
    custom_mapping: Mapping[Any, Any] | None = None,
    strict: bool = False,
    keep_modes: bool = False,
    memory: bool = False,
    as_device: torch.device | str | None = None, meta_kernels: str = "accelerator",
) -> dict[str, Any]:
    """Analyze one training step of ``model`` (forward, loss, backward, optional optimizer step).

    Returns ``crawl_module``'s report of the forward (run in train mode with gradients on; ``keep_modes=True`` keeps
    every module's own mode) plus a ``training`` section: backward operator FLOPs per layer call and totals for
    forward, loss, backward, engine and optimizer. ``loss(output)`` must return a scalar tensor (default: the sum of
    every floating output tensor); ``optimizer`` is ``"sgd"`` (momentum 0.9), ``"adam"``, ``"adamw"`` or a callable
    ``params -> torch.optim.Optimizer``. ``memory=True`` adds ``crawl_module``'s memory sections and
    ``training.memory``, the step's peak of live tensor bytes broken down. ``as_device`` is `crawl_module`'s.
    """
    check_flags(model, strict=strict, keep_modes=keep_modes, memory=memory)
    _check_loss(loss)
    make_optimizer = _optimizer_factory(optimizer)
    step = TrainingForward(keep_modes, StepMemory() if memory else None)
    analysis = request(model, input_shape, dtype, args, kwargs, device, custom_modules, custom_mapping,
                       memory=memory, as_device=as_device, step=step, meta_kernels=meta_kernels)
    report, phases = _run_step(analysis, step, loss, make_optimizer)
    report["training"] = training_section(report, phases, analysis.mapping, optimizer)
    if step.memory is not None:
        add_step_memory(report["training"], step.memory)
    if strict:
        raise_if_incomplete(report)
        raise_if_training_incomplete(report, phases)
    return report


def _run_step(analysis: Analysis, step: TrainingForward, loss: Callable[[Any], Any] | None,
              make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None
              ) -> tuple[dict[str, Any], Phases]:
    """The forward's report and the phases of the rest of the step (on stand-ins when asked); the model's state is
    put back and the step's memory timeline (if any) stops following storages, also when the step raises."""
    model = analysis.model
    try:
        with preserved_state(model), running(analysis) as run:
            report = analyze(run)
            phases = run_after_forward(step, model, loss, make_optimizer, build_formula_table(analysis.mapping))
    finally:
        if step.memory is not None:
            step.memory.close()
    return report, phases


def _check_loss(loss: Any) -> None:
    """``loss`` is None or a callable (else a ``TypeError`` naming the argument)."""
    if loss is not None and not callable(loss):
        raise TypeError(f"loss must be a callable loss(output) -> scalar tensor, got {type(loss).__name__}")


def _optimizer_factory(optimizer: Any) -> Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None:
    """The optimizer to build, checked: None, a known name, or a callable ``params -> Optimizer``."""
    if optimizer is None or callable(optimizer):
        return optimizer
    if isinstance(optimizer, str) and optimizer in OPTIMIZERS:
        return OPTIMIZERS[optimizer]
    raise ValueError(f"optimizer must be one of {sorted(OPTIMIZERS)} or a callable params -> torch.optim.Optimizer, "
                     f"got {optimizer!r}")


# -- the forward: train mode, gradients on, graph ownership ------------------------------------------------------------


class GraphOwners:
    """Which owner (layer call index or the loss) created each autograd node of the step, by creation.

    It listens to the recorder's operators through the forward and the loss: the nodes an operator created belong
    to the innermost call open when it ran (``outside`` when none is: the loss). Autograd attaches an operator's
    node after dispatch returns, so each operator's nodes are claimed when the next event arrives (`settle`). A
    closing call (it subscribes to the tracer) also claims what no operator created inside it, such as a custom
    autograd Function's node (a checkpointed block's).
    """

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
        """Claim for ``owner`` the unclaimed nodes reachable from ``outputs``, stopping where ``inputs`` came in.

        Nodes that inner calls claimed, the inputs' own nodes and ``AccumulateGrad`` (engine work) stop the walk.
        """
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

    def __init__(self, keep_modes: bool, memory: StepMemory | None = None) -> None:
        self.keep_modes = keep_modes
        self.memory = memory  # the step's traced memory, when requested
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
            self.memory.probe = probe
        self.graph.stack = tracer.stack
        with tracer.subscribed(self.graph), tracer.counting.listening(self.graph), self.saving():
            self.output = analysis.model(*analysis.args, **analysis.kwargs)
        self.graph.settle()
        return self.output

    def saving(self) -> Any:
        """Where autograd saves tensors for the backward: noted when memory is traced."""
        return nullcontext() if self.memory is None else self.memory.saving()

    def device_queries(self) -> Any:
        """Entered above each recorder of the step on stand-ins (`torchscan.calls.stand_ins.DeviceQueries`)."""
        return nullcontext() if self.stand_ins is None else self.stand_ins.device_queries()


# -- after the forward: loss, backward, optimizer --------------------------------------------------------------------


def run_after_forward(step: TrainingForward, model: nn.Module, loss: Callable[[Any], Any] | None,
                      make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer] | None,
                      formulas: Mapping[Any, Any]) -> Phases:
    """Run the loss, the backward and the optimizer step under a recorder of their own."""
    phases = Phases(new_recorder(formulas))
    recorder = phases.recorder
    phases.loss_default = loss is None
    memory = step.memory
    graph = step.graph
    with torch.enable_grad(), recorder, step.device_queries(), recorder.listening(None if memory is None else memory.probe):
        recorder.enter(phases.loss_forward)
        graph.outside = LOSS
        with step.saving(), recorder.listening(graph):
            value = compute_loss(loss, step.output)
        graph.settle()
        recorder.leave()
        graph.claim(LOSS, value, step.output)
        _hook_nodes(step.graph, phases)
        recorder.enter(phases.engine)
        if memory is not None:
            memory.backward_starts()
        with step.tracer.replaying(), step.tracer.subscribed(Recomputation(phases)):  # type: ignore[union-attr]
            value.backward()
        recorder.leave()
    step.graph.owners.clear()
    step.output = None
    if memory is not None:
        memory.backward_ended(model)
    if make_optimizer is not None:
        _optimizer_step(model, make_optimizer, phases, memory, step.device_queries())
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


def compute_loss(loss: Callable[[Any], Any] | None, output: Any) -> torch.Tensor:
    """The caller's loss of the output, checked, or the default: the sum of every floating output tensor that
    requires grad."""
    if loss is None:
        floats = [t for t in tensors_in(output) if t.is_floating_point() and t.requires_grad]
        if not floats:
            raise ValueError("the default loss found no floating-point output tensor that requires grad; pass "
                             "loss=callable(output) -> scalar tensor")
        value = floats[0].sum()
        for tensor in floats[1:]:
            value = value + tensor.sum()
        return value
    value = loss(output)
    if not (isinstance(value, torch.Tensor) and value.numel() == 1 and value.requires_grad):
        raise TypeError("loss must return a one-element tensor that requires grad, got "
                        f"{type(value).__name__}" + (f" of shape {tuple(value.shape)}" if isinstance(
                            value, torch.Tensor) else ""))
    return value


def _hook_nodes(graph: GraphOwners, phases: Phases) -> None:
    """Each claimed node enters its owner's backward scope while it runs (the hooks die with the graph)."""
    recorder = phases.recorder

    def leave(grad_inputs: Any, grad_outputs: Any) -> None:
        recorder.leave()

    for node, owner in graph.owners.items():
        scope = phases.backward_scope(owner)
        node.register_prehook(lambda grad_outputs, scope=scope: recorder.enter(scope))
        node.register_hook(leave)


def _optimizer_step(model: nn.Module, make_optimizer: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
                    phases: Phases, memory: StepMemory | None, device_queries: Any) -> None:
    """One optimizer step over ``meta`` stand-ins of the trainable parameters and their new gradients (traced on
    a timeline of its own when memory is: the stand-ins have the bytes of what they stand for)."""
    stand_ins = []
    for parameter in model.parameters():
        if parameter.requires_grad:
            stand_in = torch.empty_like(parameter, device="meta").requires_grad_()
            if parameter.grad is not None:
                stand_in.grad = torch.empty_like(parameter.grad, device="meta")
            stand_ins.append(stand_in)
    optimizer = make_optimizer(stand_ins)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must build a torch.optim.Optimizer, got {type(optimizer).__name__}")
    phases.optimizer_type = f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"
    recorder = phases.recorder
    with recorder, device_queries, recorder.listening(None if memory is None else memory.optimizer_timeline()):
        recorder.enter(phases.optimizer)
        optimizer.step()
        recorder.leave()
    if memory is not None:
        memory.optimizer_ended(optimizer)


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
