"""Every entry point takes a model whose argument and output are containers of each kind the one walker of call
values knows (`torchscan.values.container_items`): tuples, lists, named tuples, dicts, other mappings, dataclasses
(frozen too) and ``transformers``-style output objects. Each analysis must see the container's tensor, describe it,
move it (stand-ins, devices) and rebuild it as its own type."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, namedtuple
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torchscan_testing import checked

from torchscan import cost_curve, crawl_module, crawl_training_step, trace_memory
from torchscan.values import Unmappable, map_tensors, restore_state, saved_state, tensor_elements, tensors_in

Pair = namedtuple("Pair", "features scale")


@dataclasses.dataclass
class Batch:
    features: torch.Tensor
    scale: float = 1.0


@dataclasses.dataclass(frozen=True)
class FrozenBatch:
    features: torch.Tensor
    scale: float = 1.0


class Output(OrderedDict):
    """The shape of a ``transformers`` ``ModelOutput``: an ordered mapping whose items are also attributes."""

    def __setitem__(self, key: str, item: Any) -> None:
        super().__setitem__(key, item)
        object.__setattr__(self, key, item)


def _output(features: torch.Tensor) -> Output:
    out = Output()
    out["features"] = features
    return out


#: kind -> (wrap a tensor in the container, read the tensor back out)
KINDS: dict[str, tuple[Callable[[torch.Tensor], Any], Callable[[Any], torch.Tensor]]] = {
    "tuple": (lambda t: (t, 2), lambda v: v[0]),
    "list": (lambda t: [t, 2], lambda v: v[0]),
    "namedtuple": (lambda t: Pair(t, 2), lambda v: v.features),
    "dict": (lambda t: {"features": t}, lambda v: v["features"]),
    "mapping": (lambda t: OrderedDict(features=t), lambda v: v["features"]),
    "dataclass": (Batch, lambda v: v.features),
    "frozen_dataclass": (FrozenBatch, lambda v: v.features),
    "model_output": (_output, lambda v: v.features),
}


class Reads(nn.Module):
    """A linear layer on the tensor inside a container, returning the same kind of container."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.wrap, self.read = KINDS[kind]
        self.linear = nn.Linear(4, 3)

    def forward(self, value: Any) -> Any:
        return self.wrap(self.linear(self.read(value)))


def _call(kind: str, rows: int = 2) -> Any:
    return KINDS[kind][0](torch.randn(rows, 4))


@pytest.mark.parametrize("kind", KINDS)
def test_the_walker_finds_moves_and_rebuilds_each_container_kind(kind: str) -> None:
    value = _call(kind)
    assert [tuple(t.shape) for t in tensors_in(value)] == [(2, 4)]
    assert tensor_elements(value) == 8
    moved = map_tensors(value, lambda tensor: tensor.to("meta"))
    assert type(moved) is type(value)
    assert KINDS[kind][1](moved).device.type == "meta"
    assert KINDS[kind][1](value).device.type == "cpu"  # the original is left as it was
    assert map_tensors(value, lambda tensor: tensor) is value  # nothing replaced, nothing rebuilt


def test_the_walks_open_a_container_that_holds_itself_once() -> None:
    looped: list = [torch.ones(3)]
    looped.append(looped)
    assert len(tensors_in(looped)) == 1
    assert tensor_elements(looped) == 3
    assert map_tensors(looped, lambda tensor: tensor) is looped


@pytest.mark.parametrize("as_device", [None, "cpu"])
@pytest.mark.parametrize("kind", KINDS)
def test_crawl_module_takes_each_container_kind(kind: str, as_device: str | None) -> None:
    report = checked(crawl_module(Reads(kind), args=(_call(kind),), memory=True, as_device=as_device))
    linear = next(layer for layer in report["layers"] if layer["path"] == "linear")
    assert linear["input"]["args"][0]["shape"] == [2, 4]
    assert report["totals"]["macs"] == {**report["totals"]["macs"], "status": "complete", "value": 24}
    root_input = report["inputs"]["args"][0]
    assert root_input["kind"] != "object"  # described by its items, never as an opaque object
    assert report["layers"][0]["memory"]["output_bytes"]["value"] == 2 * 3 * 4


@pytest.mark.parametrize("as_device", [None, "cpu"])
@pytest.mark.parametrize("kind", KINDS)
def test_crawl_training_step_takes_each_container_kind(kind: str, as_device: str | None) -> None:
    report = checked(crawl_training_step(Reads(kind), args=(_call(kind),), optimizer="sgd", as_device=as_device))
    assert report["training"]["totals"]["backward"]["status"] == "complete"
    assert report["training"]["totals"]["backward"]["value"] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_cost_curve_takes_each_container_kind(kind: str) -> None:
    curve = cost_curve(Reads(kind).to("meta"), [1, 2, 3], lambda rows: ((_call(kind, rows),), {}), device="meta")
    macs = [point["totals"]["macs"]["value"] for point in curve["points"]]
    assert macs == [12, 24, 36]


@pytest.mark.parametrize("kind", KINDS)
def test_trace_memory_follows_each_container_kind(kind: str) -> None:
    model, value = Reads(kind), _call(kind)
    trace = trace_memory(lambda: model(value))
    assert trace["at_end"]["created"]["value"] == 2 * 3 * 4  # the output's tensor, inside its container


# -- objects holding tensors: what stand-ins open (``map_tensors(..., objects=True)``) -------------------------------


class Layer:
    """A KV-cache layer's shape: tensors, a flag, and the device its tensors are on, as plain attributes."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys
        self.values = keys.clone()
        self.ready = True
        self.device = keys.device


class Cache:
    def __init__(self, *layers: Any) -> None:
        self.layers = list(layers)
        self.flags = [False] * len(layers)


class Slotted:
    __slots__ = ("__hidden", "state")

    def __init__(self, state: torch.Tensor) -> None:
        self.state = state
        self.__hidden = state


def _to_meta(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to("meta")


def test_objects_holding_tensors_become_copies_with_their_tensors_and_devices_replaced() -> None:
    cache = Cache(Layer(torch.zeros(2, 3)), Layer(torch.ones(4)))
    moved = map_tensors(cache, _to_meta, objects=True)
    assert type(moved) is Cache and moved is not cache and moved.layers is not cache.layers
    assert [layer.keys.device.type for layer in moved.layers] == ["meta", "meta"]
    assert [layer.device.type for layer in moved.layers] == ["meta", "meta"]  # follows its tensors
    assert [layer.keys.device.type for layer in cache.layers] == ["cpu", "cpu"]  # the originals are untouched
    assert cache.layers[0].device.type == "cpu" and moved.flags is cache.flags  # no tensor: shared, not copied
    assert map_tensors(cache, _to_meta) is cache  # without objects=True, objects are values like any other
    assert map_tensors(cache, lambda tensor: tensor, objects=True) is cache  # nothing replaced, nothing copied
    assert map_tensors(nn.Linear(2, 2), _to_meta, objects=True).weight.device.type == "cpu"  # modules stay closed


def test_an_object_or_tensor_held_twice_is_replaced_once_and_slots_are_opened() -> None:
    layer = Layer(torch.zeros(2))
    pair = map_tensors([layer, layer, layer.keys], _to_meta, objects=True)
    assert pair[0] is pair[1] and pair[0].keys is pair[2]
    slotted = map_tensors(Slotted(torch.zeros(3)), _to_meta, objects=True)
    assert slotted.state.device.type == slotted._Slotted__hidden.device.type == "meta"  # type: ignore[attr-defined]


class Frozen:
    __slots__ = ("state",)

    def __init__(self, state: torch.Tensor) -> None:
        object.__setattr__(self, "state", state)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("frozen")


def _refusal(value: Any, function: Callable[[torch.Tensor], Any] = _to_meta) -> Unmappable:
    with pytest.raises(Unmappable) as error:
        map_tensors(value, function, objects=True)
    return error.value


def test_what_cannot_be_rebuilt_is_refused_naming_where_it_sits() -> None:
    refused = _refusal({"cache": Cache(Layer(torch.zeros(1)), Frozen(torch.zeros(1)))})
    assert (refused.place("kwargs"), refused.kind) == ("kwargs['cache'].layers[1]", "Frozen")
    assert refused.reason == "copying it failed (AttributeError: frozen)"
    looped = Layer(torch.zeros(1))
    looped.owner = looped  # type: ignore[attr-defined]
    refused = _refusal((looped,))
    assert (refused.place("args"), refused.kind) == ("args[0]", "Layer")
    assert "holds itself" in refused.reason

    def only_meta(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.dim() != 1:
            raise Unmappable("Tensor", "two dimensions")
        return _to_meta(tensor)

    refused = _refusal([Cache(Layer(torch.zeros(1)), Layer(torch.zeros(1, 1)))], only_meta)
    assert refused.place("args") == "args[0].layers[1].keys" and str(refused) == "Tensor: two dimensions"


def test_saved_state_puts_back_what_the_call_shares_with_its_copies() -> None:
    empty, flags, options = Layer(torch.zeros(1)), [False, False], {"mode": "a"}
    del empty.keys, empty.values
    slotted = Slotted(torch.zeros(1))
    call = ((Cache(empty), flags), {"options": options, "slotted": slotted})
    saved = saved_state(call)
    kept = (dict(vars(empty)), list(flags), dict(options), slotted.state)
    empty.keys, flags[0], options["mode"], slotted.state = torch.ones(1), True, "b", torch.ones(1)
    flags.append(True)
    restore_state(saved)
    assert (dict(vars(empty)), flags, options, slotted.state) == kept
    assert call[0][1] is flags and call[1]["options"] is options  # put back in place, never replaced
