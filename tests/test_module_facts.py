"""Module facts: the module walk (as ``named_modules()`` lists modules) and the parameter and buffer statistics."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

from torchscan.module_facts import model_facts, tensor_statistics


def _tree() -> nn.Module:
    """Shared children (visited once, under their first path), a child registered as None, and nesting."""
    shared = nn.Linear(2, 2)
    inner = nn.Sequential(shared, nn.ReLU(), nn.Sequential(nn.Tanh(), shared))
    tree = nn.Sequential(inner, shared, nn.Sequential(inner))
    tree.add_module("missing", None)
    return tree


class _Renamed(nn.Sequential):
    """A container whose own ``named_modules`` lists its children under other names (as wrappers do)."""

    def named_modules(self, memo=None, prefix="", remove_duplicate=True) -> Iterator[tuple[str, nn.Module]]:
        for path, module in super().named_modules(memo, prefix, remove_duplicate):
            yield path.replace("0", "first"), module


def test_a_module_that_overrides_named_modules_is_walked_by_its_own_method():
    model = nn.Sequential(_Renamed(nn.ReLU()), nn.Tanh())
    assert [path for path, _ in model_facts(model, {}, None).modules] == ["", "first", "first.first", "1"]


def test_model_facts_follow_the_walk_and_record_leaves_and_training_flags():
    tree = _tree()
    tree[0].train(False)
    facts = model_facts(tree, {}, None)
    assert [path for path, _ in facts.modules] == [path for path, _ in tree.named_modules()]
    assert [info.leaf for info in facts.infos.values()] == [False, False, True, True, False, True, False]
    assert [flag for _, flag in facts.training_flags] == [module.training for _, module in tree.named_modules()]


def test_statistics_count_a_shared_tensor_once_and_collect_its_device_and_dtype():
    first, second = nn.Linear(2, 2), nn.Linear(2, 2)
    second.weight = first.weight  # tied: counted under the first module that holds it
    first.weight.requires_grad_(False)
    model = nn.Sequential(first, second)
    model.register_buffer("steps", torch.zeros((), dtype=torch.int64))
    kinds: set[tuple[str, str]] = set()
    statistics = tensor_statistics(list(model.named_modules()), kinds)
    assert statistics["0"][0] == {"count": 6, "bytes": 24, "trainable": 2, "frozen": 4}
    assert statistics["1"][0] == {"count": 2, "bytes": 8, "trainable": 2, "frozen": 0}
    assert statistics[""] == ({"count": 0, "bytes": 0, "trainable": 0, "frozen": 0}, {"count": 1, "bytes": 8})
    assert kinds == {("cpu", "float32"), ("cpu", "int64")}


def test_statistics_skip_none_entries_and_uninitialized_lazy_parameters():
    lazy = nn.LazyLinear(3)
    lazy.register_parameter("extra", None)
    statistics = tensor_statistics([("", lazy)], kinds := set())
    assert statistics[""][0] == {"count": 0, "bytes": 0, "trainable": 0, "frozen": 0}
    assert kinds == set()
    meta = nn.Linear(2, 2, device="meta", dtype=torch.float16)
    statistics = tensor_statistics([("", meta)], kinds)
    assert statistics[""][0] == {"count": 6, "bytes": 12, "trainable": 6, "frozen": 0}
    assert kinds == {("meta", "float16")}
