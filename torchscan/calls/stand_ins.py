"""Fake-tensor stand-ins: analyze a model as if its tensors were on another device, without allocating anything.

Kernels decide cost. A model on ``meta`` runs meta kernels: ``scaled_dot_product_attention`` there takes the math
path and materializes score matrices that the fused kernel of a real device never allocates. PyTorch's fake tensors
(``torch._subclasses.fake_tensor``) report the device they stand for, so the operators that choose a kernel by
device choose the one that device would run, while their storages stay on ``meta``. ``as_device="cpu"`` runs the
analysis on such stand-ins: every parameter and buffer of the model is swapped for a fake tensor of the same
shape, strides, dtype and ``requires_grad`` on that device for the analysis (tied tensors stay tied), and the
model's own tensors are put back afterwards, untouched.

The call's tensors are replaced the same way (`StandIns.call`), in its containers and inside objects whose
attributes hold tensors: a decode step's ``transformers`` KV cache and its layers become shallow copies holding
stand-ins (`torchscan.values.map_tensors` with ``objects=True``), so the step runs the device's fused attention over
its cache, and the forward's changes (the cache appending the new position) land on the copies. What the copies
share with the caller's values because it holds no tensor (the layers of an empty cache) is put back afterwards
(`torchscan.values.restore_state`): the caller's values end exactly as they began. A tensor that cannot get a
stand-in (a subclass, a sparse tensor, one inside an object that cannot be copied) is refused before the forward
with one paragraph naming where it sits in the call and the way out. A tensor that stand-ins cannot see (a plain
tensor attribute of a module) meets them in the forward: PyTorch's device mismatch error then gets a note naming
the module attributes that hold tensors. `stand_in_device` says which devices stand-ins accept.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorDeviceMismatchError, FakeTensorMode
from torch.nn.parameter import is_lazy
from torch.utils._python_dispatch import TorchDispatchMode

from ..values import TENSOR_TYPES, Unmappable, map_tensors, restore_state, saved_state, tensors_in
from .inputs import require_available

#: The device types whose kernel choices stand-ins keep (a CUDA one only on a build and machine that have it).
STAND_IN_DEVICES = ("cpu", "cuda")
KIND = "fake_tensors"
_DEVICE_QUERY = torch.ops.prim.device.default


def stand_in_device(as_device: Any) -> torch.device | None:
    """``as_device`` checked: None, or the ``torch.device`` whose kernel choices the stand-ins keep.

    Refused with a ``ValueError`` naming the argument: a value that is not a device, ``meta`` (which has no kernel
    choice to keep: analyze the model on meta directly), a device type other than ``cpu`` and ``cuda``, and a
    device this torch build or machine does not have.
    """
    if as_device is None:
        return None
    try:
        device = torch.device(as_device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"as_device must be None or a device such as 'cpu' or 'cuda:0', got {as_device!r}"
                         ) from error
    if device.type not in STAND_IN_DEVICES:
        hint = ": a model on meta is analyzed with meta kernels without as_device" if device.type == "meta" else ""
        raise ValueError(f"as_device must name a device whose kernel choices stand-ins keep "
                         f"({', '.join(STAND_IN_DEVICES)}), got {str(device)!r}{hint}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"as_device={str(device)!r} needs a torch build with a usable CUDA device (this torch "
                         f"{torch.__version__} reports none: torch.cuda.is_available() is False); fake cuda tensors "
                         "here would take the math attention path, not the kernels a GPU runs")
    require_available(device, "as_device")
    return device


@dataclass
class StandIns:
    """The stand-ins of one analysis: the fake-tensor mode, the device they stand for, the model's own devices, and
    the stand-in of each of the model's parameters and buffers (by ``id`` of the original, which the model holds)."""

    device: torch.device
    model_devices: list[str]
    mode: FakeTensorMode = field(default_factory=lambda: FakeTensorMode(allow_non_fake_inputs=True))
    model_tensors: dict[int, torch.Tensor] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The report's ``stand_ins`` field: what the analysis ran on, and the devices of the model's own tensors."""
        return {"kind": KIND, "device": str(self.device), "model_devices": list(self.model_devices)}

    def tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """A fake tensor on the stand-in device with ``tensor``'s shape, strides, dtype and ``requires_grad`` (a
        parameter's stand-in is a parameter); nothing is allocated."""
        with self.mode:
            fake = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device=self.device)
        if isinstance(tensor, nn.Parameter):
            return nn.Parameter(fake, requires_grad=tensor.requires_grad)
        return fake.requires_grad_() if tensor.requires_grad else fake

    def call_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """The stand-in of a tensor of the call: the model's stand-in for one of its parameters or buffers, else a new
        `tensor`. Raises `Unmappable` for a tensor no fake tensor can stand in for: a subclass (its own dispatch
        would not run) and a sparse or nested tensor (no strides to copy).

        Nothing here keeps a call's stand-in alive: the call holds it, and when the forward drops it (a KV cache
        layer replacing its keys by longer ones) the memory trace sees it freed, as on the device."""
        known = self.model_tensors.get(id(tensor))
        if known is not None:
            return known
        if type(tensor) not in TENSOR_TYPES:
            raise Unmappable(type(tensor).__qualname__, "a tensor subclass, whose own behaviour a plain fake tensor "
                                                        "would drop")
        if tensor.layout is not torch.strided or tensor.is_nested:
            kind = "nested" if tensor.is_nested else str(tensor.layout).removeprefix("torch.")
            raise Unmappable(type(tensor).__qualname__, f"a {kind} tensor, which has no strides for a fake tensor to "
                                                        "copy")
        return self.tensor(tensor)

    @contextmanager
    def call(self, args: tuple, kwargs: dict[str, Any]) -> Iterator[tuple[tuple, dict[str, Any]]]:
        """The call's stand-ins for the block (replaced as the module docstring says), the caller's values exactly
        as they were afterwards, also when the block raises; a tensor that cannot be replaced is refused first."""
        saved = saved_state((args, kwargs))
        try:
            try:
                stand_in_args, stand_in_kwargs = map_tensors((args, kwargs), self.call_tensor, objects=True)
            except Unmappable as error:
                raise self._refusal(error) from None
            yield stand_in_args, stand_in_kwargs
        finally:
            restore_state(saved)

    def _refusal(self, error: Unmappable) -> TypeError:
        """The one-paragraph error for a value of the call that cannot get stand-ins, named from ``args``/``kwargs``."""
        root = "args" if error.steps.pop() == "[0]" else "kwargs"  # the outermost step enters the (args, kwargs) pair
        return TypeError(
            f"as_device={str(self.device)!r}: {error.place(root)} ({error.kind}) cannot get fake-tensor stand-ins: "
            f"{error.reason}. Left as it is, it would keep its own device and meet the stand-ins in the forward. Pass "
            "its tensors as tensors of the call (in tuples, lists, dicts, dataclasses or objects that can be copied), "
            "register them as buffers of the model, or analyze without as_device.")

    def kernel_note(self) -> str:
        """What a memory section's attention-kernel reason adds when the trace ran on these stand-ins."""
        return (f"; traced on fake-tensor stand-ins on {self.device}, which keep the kernel choices "
                f"{self.device.type} makes")

    def device_queries(self) -> DeviceQueries:
        """The mode to enter above every observing mode (see `DeviceQueries`)."""
        return DeviceQueries()


class DeviceQueries(TorchDispatchMode):
    """Answers a fake tensor's device query (``prim.device``) before the modes below it see it.

    A fake tensor reports its device through dispatch, so every operator that checks a device (attention choosing
    its kernel checks it a dozen times) would show the operator recorder and the memory trace a ``prim.device``
    call that a real tensor never dispatches. Entered above them, this mode answers the query itself and passes
    every other operator down unchanged.
    """

    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch would otherwise wrap __torch_dispatch__ to import torch._dynamo on first use (about a second).
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        if func is _DEVICE_QUERY and isinstance(args[0], FakeTensor):
            return args[0].fake_device
        return func(*args, **(kwargs or {}))


@contextmanager
def standing_in(model: nn.Module, device: torch.device) -> Iterator[StandIns]:
    """Swap the model's parameters and buffers for stand-ins on ``device`` and enter the fake-tensor mode for the
    block; the model's own tensors are put back afterwards, also when the block raises. A device mismatch in the
    block (a tensor nothing replaced met the stand-ins) gets a note naming the tensors that stand-ins cannot reach."""
    _refuse_lazy(model)
    _load_fake_kernels()
    stand_ins = StandIns(device, sorted({str(tensor.device) for tensor in (*model.parameters(), *model.buffers())}))
    swapped = _swap_in(model, stand_ins)
    try:
        with stand_ins.mode:
            yield stand_ins
    except FakeTensorDeviceMismatchError as error:
        error.add_note(_mismatch_note(model, device))
        raise
    finally:
        for store, name, tensor in reversed(swapped):
            store[name] = tensor


def _mismatch_note(model: nn.Module, device: torch.device) -> str:
    """One paragraph for a device mismatch on stand-ins: which tensors stand-ins replace, the module attributes
    holding tensors that they do not (the usual culprits), and the way out."""
    attributes = _plain_tensor_attributes(model)
    culprits = (f" This model holds tensors in plain module attributes: {', '.join(attributes)}." if attributes
                else "")
    return (f"as_device={str(device)!r}: a tensor that stand-ins do not replace kept its own device and met the "
            f"{device.type} stand-ins. Stand-ins replace the model's parameters and buffers and the tensors of the "
            "call, inside containers and inside objects such as KV caches; a plain tensor attribute of a module, or "
            f"a tensor inside an object TorchScan cannot look into (a C-extension object, a closure), is left as it "
            f"is.{culprits} Register such a tensor as a buffer, pass it as a tensor of the call, or analyze without "
            "as_device.")


#: The attributes every module has (parameters, buffers, submodules, hooks, flags): not the model's own state.
_MODULE_INTERNALS = frozenset(vars(nn.Module()))


def _plain_tensor_attributes(model: nn.Module) -> list[str]:
    """``path.name (Type)`` of each module attribute that holds tensors outside the parameters and buffers."""
    return [f"{f'{path}.' if path else ''}{name} ({type(module).__name__})" for path, module in model.named_modules()
            for name, item in vars(module).items() if name not in _MODULE_INTERNALS and tensors_in(item)]


def _swap_in(model: nn.Module, stand_ins: StandIns) -> list[tuple[dict[str, Any], str, torch.Tensor]]:
    """Put a stand-in in every parameter and buffer slot (a tensor in several slots gets one stand-in); returns
    ``(slots, name, original)`` for each swap."""
    swapped: list[tuple[dict[str, Any], str, torch.Tensor]] = [
        (store, name, tensor) for module in model.modules() for store in (module._parameters, module._buffers)
        for name, tensor in store.items() if tensor is not None]
    made = stand_ins.model_tensors
    for store, name, tensor in swapped:
        if id(tensor) not in made:
            made[id(tensor)] = stand_ins.tensor(tensor)
        store[name] = made[id(tensor)]
    return swapped


def _refuse_lazy(model: nn.Module) -> None:
    """Lazy modules materialize their parameters (and change class) on their first forward: not on stand-ins."""
    lazy = [name for name, tensor in (*model.named_parameters(), *model.named_buffers()) if is_lazy(tensor)]
    if lazy:
        raise ValueError(f"as_device: the model has uninitialized lazy parameters or buffers ({', '.join(lazy)}) that "
                         "its first forward would materialize; run one forward (or crawl_module) without as_device "
                         "first")


@functools.cache
def _load_fake_kernels() -> None:
    """Run one operator on a fake tensor before the first analysis on stand-ins: fake tensors compute through meta
    kernels, which PyTorch imports on first use, inside the forward otherwise (see `torchscan.memory.forward`)."""
    with FakeTensorMode():
        torch.empty(1).add(1)
