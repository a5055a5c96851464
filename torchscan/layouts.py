"""Where the values of a flat tuple sit, by kind: the step that lets memo keys be read in C-level operations.

Two memo keys (an operator call's `~torchscan.operator_cache.signature` and a module's
`~torchscan.estimate_memo.module_configuration`) describe a tuple of values (a call's arguments and output, a
module's public attributes) by the type of each value, and then each value by what its type makes relevant: a
tensor's shape and dtype, a scalar's value, a list's items. Looping over the values in Python costs most of a key.
Instead, the tuple of the values' types selects a *layout*, computed once per distinct tuple of types: for each
category of values, a picker of their positions. Pickers are ``operator.itemgetter`` calls, and the values they
pick are then described with ``map``: no Python code runs per value of the common kinds. (A module call's memo
structure, `~torchscan.estimate_memo.call_structure`, describes two or three values: a plain loop is cheaper.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

#: Picks the values at some positions of a tuple, as a tuple.
Picker = Callable[[tuple], tuple]


def _nothing(values: tuple) -> tuple:
    return ()


def picker(positions: Sequence[int]) -> Picker:
    """The values at ``positions`` (in that order), always as a tuple (``itemgetter`` returns one value alone)."""
    if not positions:
        return _nothing
    if len(positions) == 1:
        position = positions[0]
        return lambda values: (values[position],)
    return itemgetter(*positions)


def layout(kinds: tuple[type, ...], category: Callable[[type], int], categories: int) -> tuple[Picker, ...]:
    """One picker per category (``category(kind)`` is a number below ``categories``) of the values whose types are
    ``kinds``. Callers cache the layouts by ``kinds``: it is a pure function of them."""
    positions: list[list[int]] = [[] for _ in range(categories)]
    for index, kind in enumerate(kinds):
        positions[category(kind)].append(index)
    return tuple(picker(found) for found in positions)


def describe_all(describe: Callable[[Any], Any], values: tuple) -> tuple:
    """``describe`` of each value, in order: for the rare values that need Python code to describe."""
    return tuple([describe(value) for value in values]) if values else ()
