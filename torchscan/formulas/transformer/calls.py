"""Reading a call of a native attention or Transformer module: bound arguments, token sequences, native checks.

Arguments are read by the real ``forward`` signature of the call, so positional, keyword and default arguments
all resolve the same way. A module is *native* when its class keeps PyTorch's implementation of every method the
formulas describe; a subclass that overrides one is outside the formulas.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

import torch
from torch import nn

from ...handlers import ModuleCall

#: An attention mask and a key padding mask, as passed (either may be None).
Masks = tuple[torch.Tensor | None, torch.Tensor | None]
NativeModule = TypeVar("NativeModule", bound=nn.Module)


class UnsupportedCall(Exception):
    """The call is outside what the formulas justify (a nested tensor input, an unexpected rank)."""


@dataclass(frozen=True)
class Tokens:
    """A token sequence: batch N (1 when unbatched), length, features per token."""

    batch: int
    length: int
    width: int

    @property
    def elements(self) -> int:
        return self.batch * self.length * self.width


def tokens(tensor: torch.Tensor, batch_first: bool) -> Tokens:
    """(L, E) unbatched, (L, N, E) or (N, L, E) batched."""
    if tensor.is_nested:
        raise UnsupportedCall("nested tensor input")
    shape = [int(size) for size in tensor.shape]
    if len(shape) == 2:
        return Tokens(1, shape[0], shape[1])
    if len(shape) == 3:
        batch, length = (shape[0], shape[1]) if batch_first else (shape[1], shape[0])
        return Tokens(batch, length, shape[2])
    raise UnsupportedCall(f"a {len(shape)}-D sequence input")


_forward_signature = functools.cache(inspect.signature)


def call_arguments(call: ModuleCall) -> dict[str, Any]:
    """Every forward argument by name, defaults included, bound exactly as Python bound the call."""
    bound = _forward_signature(type(call.module).forward).bind(call.module, *call.args, **call.kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


#: Methods whose native implementation the formulas describe; a subclass overriding one is not estimated.
NATIVE_METHODS: dict[type[nn.Module], tuple[str, ...]] = {
    nn.MultiheadAttention: ("forward",),
    nn.TransformerEncoderLayer: ("forward", "_sa_block", "_ff_block"),
    nn.TransformerDecoderLayer: ("forward", "_sa_block", "_mha_block", "_ff_block"),
    nn.TransformerEncoder: ("forward",),
    nn.TransformerDecoder: ("forward",),
    nn.Transformer: ("forward",),
    nn.Linear: ("forward",),
}


def is_native(module: Any, base: type[NativeModule]) -> TypeGuard[NativeModule]:
    """``module`` is a ``base`` whose class keeps PyTorch's own version of every method the formulas describe."""
    return isinstance(module, base) and all(
        getattr(type(module), name) is getattr(base, name) for name in NATIVE_METHODS[base])
