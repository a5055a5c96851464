"""Value metadata takes shortcuts for exact built-in types and plain tensors; everything else keeps its own path."""

from __future__ import annotations

import enum
from collections import OrderedDict, UserDict

import torch

from torchscan.inputs import MAX_DEPTH, call_metadata, value_metadata


class Level(enum.IntEnum):
    LOW = 1


class Name(str):
    pass


class Items(list):
    pass


class Row(tuple):
    pass


class Elsewhere(torch.Tensor):
    """A tensor subclass that reports another device than the one its storage is on (as FakeTensor does)."""

    @property
    def device(self):
        return torch.device("meta")


def test_subclasses_of_scalars_and_containers_keep_their_kinds():
    assert value_metadata(Level.LOW) == {"kind": "scalar", "type": "Level"}
    assert value_metadata(Name("x")) == {"kind": "scalar", "type": "Name"}
    assert value_metadata(True) == {"kind": "scalar", "type": "bool"}
    assert value_metadata(Items([1])) == {"kind": "sequence", "items": [{"kind": "scalar", "type": "int"}]}
    assert value_metadata(Row((None,))) == {"kind": "sequence", "items": [{"kind": "none"}]}
    assert value_metadata(OrderedDict(a=1))["kind"] == value_metadata(UserDict(a=1))["kind"] == "mapping"


def test_self_reference_and_depth_are_bounded():
    loop: list = []
    loop.append(loop)
    assert value_metadata(loop) == {"kind": "list", "items": [{"kind": "recursive", "type": "list"}]}
    deep: object = 0
    for _ in range(MAX_DEPTH + 5):
        deep = (deep,)
    level = value_metadata(deep)
    for _ in range(MAX_DEPTH):
        level = level["items"][0]
    assert level == {"kind": "truncated", "type": "tuple"}


def test_tensor_subclasses_are_asked_for_their_device():
    plain = torch.zeros(2)
    assert value_metadata(plain)["device"] == "cpu"
    assert value_metadata(plain.as_subclass(Elsewhere))["device"] == "meta"
    assert value_metadata(torch.nn.Parameter(torch.zeros(2, device="meta")))["device"] == "meta"


def test_every_description_is_a_new_object():
    """Every description is built anew: a caller may keep and edit it."""
    first, second = value_metadata(3), value_metadata(3)
    first["type"] = "edited"
    assert second == value_metadata(3) == {"kind": "scalar", "type": "int"}
    x = torch.zeros(1)
    call = call_metadata((x, x), {"y": x})
    assert call["args"][0] is not call["args"][1] and call["args"][0]["shape"] is not call["args"][1]["shape"]
