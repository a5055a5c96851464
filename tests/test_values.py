"""Call values: their descriptions (exact built-in types first, subclasses on their own path), their keys and the
dtypes of their tensors."""

from __future__ import annotations

import enum
from collections import OrderedDict, UserDict

import pytest
import torch

from torchscan.values import (
    MAX_DEPTH,
    Unkeyable,
    call_key,
    call_metadata,
    describe,
    nested_key,
    operand_dtypes,
)


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
    assert describe(Level.LOW) == {"kind": "scalar", "type": "Level"}
    assert describe(Name("x")) == {"kind": "scalar", "type": "Name"}
    assert describe(True) == {"kind": "scalar", "type": "bool"}
    assert describe(Items([1])) == {"kind": "sequence", "items": [{"kind": "scalar", "type": "int"}]}
    assert describe(Row((None,))) == {"kind": "sequence", "items": [{"kind": "none"}]}
    assert describe(OrderedDict(a=1))["kind"] == describe(UserDict(a=1))["kind"] == "mapping"


def test_self_reference_and_depth_are_bounded():
    loop: list = []
    loop.append(loop)
    assert describe(loop) == {"kind": "list", "items": [{"kind": "recursive", "type": "list"}]}
    deep: object = 0
    for _ in range(MAX_DEPTH + 5):
        deep = (deep,)
    level = describe(deep)
    for _ in range(MAX_DEPTH):
        level = level["items"][0]
    assert level == {"kind": "truncated", "type": "tuple"}


def test_tensor_subclasses_are_asked_for_their_device():
    plain = torch.zeros(2)
    assert describe(plain)["device"] == "cpu"
    assert describe(plain.as_subclass(Elsewhere))["device"] == "meta"
    assert describe(torch.nn.Parameter(torch.zeros(2, device="meta")))["device"] == "meta"


def test_every_description_is_a_new_object():
    """Every description is built anew: a caller may keep and edit it."""
    first, second = describe(3), describe(3)
    first["type"] = "edited"
    assert second == describe(3) == {"kind": "scalar", "type": "int"}
    x = torch.zeros(1)
    call = call_metadata((x, x), {"y": x})
    assert call["args"][0] is not call["args"][1] and call["args"][0]["shape"] is not call["args"][1]["shape"]


def test_call_keys_tell_apart_what_a_formula_can_read_and_nothing_else():
    x, y = torch.zeros(2, 3), torch.ones(2, 3)
    assert call_key((x, 2)) == call_key((y, 2)) == [torch.Size([2, 3]), torch.float32, int, 2]
    assert call_key((x, 2)) != call_key((x, 2.0)) != call_key((x, True))  # typed scalars
    assert call_key(([1, 2],)) != call_key(((1, 2),))  # a list and a tuple are different arguments
    assert call_key((x.double(),)) != call_key((x,)) and call_key((x[:1],)) != call_key((x,))
    assert call_key(([x, 1],)) == [(list, ((torch.Tensor, torch.Size([2, 3]), torch.float32, None), (int, 1)))]
    assert call_key(({"scale": 2},)) != call_key(({"scale": 3},))


def test_call_keys_with_storages_tell_a_view_of_an_argument_from_a_copy():
    x = torch.zeros(2, 3)
    view, copy = call_key((x, x[0]), storages={}), call_key((x, x[0].clone()), storages={})
    assert view != copy and view[2] == view[5] == 0 and copy[5] == 1
    assert call_key((x, x[0])) == call_key((x, x[0].clone()))  # without storages: shapes and dtypes only


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_what_no_key_captures_is_unkeyable():
    nested = torch.nested.nested_tensor([torch.rand(2, 3), torch.rand(4, 3)])
    for value in (object(), nested, [nested], {"f": print}):
        with pytest.raises(Unkeyable):
            call_key((value,))
    with pytest.raises(Unkeyable):
        nested_key((1, torch.zeros(1)), tensors=False)  # a configuration attribute may be read for its values
    with pytest.raises(Unkeyable):
        call_key([torch.zeros(1)], tensors=False)
    assert nested_key((1, "a", torch.float32), tensors=False) == nested_key((1, "a", torch.float32))


def test_operand_dtypes_read_tensors_one_level_into_lists_and_complex_scalars():
    x, y = torch.zeros(2), torch.zeros(2, dtype=torch.int64)
    assert operand_dtypes((x, [y, 3], 2)) == ({torch.float32, torch.int64}, False)
    assert operand_dtypes((x, 1j)) == ({torch.float32}, True)
    assert operand_dtypes(([1, 2], None, torch.float16)) == (set(), False)
