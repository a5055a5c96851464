"""One analysis end to end: execution state and restoration, layer-call records, parameter statistics, incomplete
metrics and their diagnostics, strict mode, structure mode, determinism and the meta device."""

from __future__ import annotations

import contextlib
import gc
import json
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchscan_testing import OPAQUE, analyze, opaque
from torchscan_testing import OpaqueLeaf as Opaque

from torchscan import IncompleteAnalysisError, ModuleCall, ModuleHandler, crawl_module
from torchscan.formulas.operators.functional import FUNCTIONAL_ESTIMATES
from torchscan.schema import validate_report

# -- fixtures -------------------------------------------------------------------------------------------------------------

class Scale(nn.Module):
    """Elementwise doubling, estimated by a caller handler (so the tests do not depend on built-in families)."""

    def forward(self, x):
        return x * 2


def estimate_scale(call: ModuleCall):
    elements = call.output.numel()
    return {"module_flops": elements, "macs": 0, "dmas": 2 * elements, "receptive_field": 1,
            "effective_stride": 1, "effective_padding": 0}


SCALE = {Scale: ModuleHandler(estimate_scale)}


def mul_flops(*shapes, out_shape, **kwargs):
    return torch.Size(out_shape).numel()


MUL = {torch.ops.aten.mul: mul_flops}


class DirectWork(nn.Module):
    """A composite whose own forward runs an operator that neither a child nor a handler covers."""

    def __init__(self):
        super().__init__()
        self.scale = Scale()

    def forward(self, x):
        return opaque(self.scale(x))


class Probe(nn.Module):
    """Remembers the training flag and grad mode it saw."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, x):
        self.seen.append((self.training, torch.is_grad_enabled()))
        return x + 1


class Tree(nn.Module):
    def __init__(self, error: Exception | None = None):
        super().__init__()
        self.a = Probe()
        self.b = nn.Sequential(Probe(), Probe())
        self.error = error
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        x = self.b(self.a(x))
        if self.error is not None:
            raise self.error
        return x


def mixed_tree(error: Exception | None = None) -> Tree:
    tree = Tree(error)
    tree.train()
    tree.a.eval()
    tree.b[1].eval()
    return tree


HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
              "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks")


def snapshot(model: nn.Module) -> dict:
    """Everything about a model that an analysis must leave as it found it."""
    return {
        "modules": [(name, type(m), m.training, sorted(vars(m)), sorted(m._parameters), sorted(m._buffers),
                     {attr: dict(getattr(m, attr)) for attr in HOOK_DICTS})
                    for name, m in model.named_modules()],
        "state": {key: (value.clone(), value.device, value.dtype) for key, value in model.state_dict().items()},
        "grads": [(p.requires_grad, p.grad) for p in model.parameters()],
        "global_hooks": [len(getattr(nn.modules.module, name)) for name in dir(nn.modules.module)
                         if name.startswith("_global_") and name.endswith("hooks")],
    }


def assert_unchanged(model: nn.Module, before: dict) -> None:
    after = snapshot(model)
    assert after["modules"] == before["modules"]
    assert after["state"].keys() == before["state"].keys()
    for key, (value, device, dtype) in before["state"].items():
        assert torch.equal(after["state"][key][0], value) and after["state"][key][1:] == (device, dtype)
    assert after["grads"] == before["grads"]
    assert after["global_hooks"] == before["global_hooks"]


def training_flags(model: nn.Module) -> list[bool]:
    return [m.training for m in model.modules()]


# -- execution state --------------------------------------------------------------------------------------------------------

def test_one_forward_in_eval_mode_under_no_grad_and_every_flag_restored():
    tree = mixed_tree()
    flags = training_flags(tree)
    assert flags == [True, False, True, True, False]
    before = snapshot(tree)
    report = analyze(tree, (3,))
    assert tree.calls == 1
    assert [probe.seen for probe in (tree.a, tree.b[0], tree.b[1])] == [[(False, False)]] * 3
    assert training_flags(tree) == flags
    assert_unchanged(tree, before)
    assert report["context"]["execution"] == {"mode": "eval", "grad": "no_grad", "forward_passes": 1}
    assert report["context"]["prior_training"] == {"root": True, "training_modules": 3, "modules": 5}
    assert torch.is_grad_enabled()


class CachedAttention(nn.Module):
    """Caches an eval-time bias, and clears it in its own ``train()`` (as timm's LeViT and EfficientFormer do)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.cache: dict[str, torch.Tensor] = {}
        self.train_calls: list[bool] = []

    def train(self, mode: bool = True) -> CachedAttention:
        super().train(mode)
        self.train_calls.append(mode)
        if mode:
            self.cache.clear()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            self.cache.setdefault("bias", torch.zeros(3))
        return self.proj(x) + self.cache.get("bias", 0)


def test_modes_are_switched_and_restored_through_the_models_own_train():
    model = nn.Sequential(CachedAttention(), nn.Sequential(CachedAttention(), nn.ReLU())).train()
    model[1].eval()  # a subtree in eval inside a model in training mode
    model[0].train_calls.clear()
    flags = training_flags(model)
    analyze(model, (3,))
    assert training_flags(model) == flags
    assert model[0].cache == {} and model[0].train_calls == [False, True]  # the override ran both ways
    assert model[1][0].train_calls[-1] is False  # the eval subtree was put back in eval through its own train()


def test_a_train_override_that_ignores_its_mode_still_leaves_every_flag_as_it_was():
    class Stubborn(nn.Module):
        def train(self, mode: bool = True) -> Stubborn:
            return self  # never changes a flag

        def forward(self, x):
            return x

    model = nn.Sequential(nn.Linear(3, 3), Stubborn(), nn.ReLU()).train()
    model[2].eval()
    flags = training_flags(model)
    analyze(model, (3,))
    assert training_flags(model) == flags


def test_a_forward_error_propagates_unchanged_and_state_is_restored():
    error = RuntimeError("the model's own failure")
    tree = mixed_tree(error)
    flags = training_flags(tree)
    before = snapshot(tree)
    with pytest.raises(RuntimeError) as raised:
        crawl_module(tree, (3,))
    assert raised.value is error
    assert training_flags(tree) == flags
    assert_unchanged(tree, before)
    assert torch.is_grad_enabled()


def test_an_error_deep_in_a_child_propagates_and_state_is_restored():
    class Broken(nn.Module):
        def __init__(self, error):
            super().__init__()
            self.error = error

        def forward(self, x):
            raise self.error

    error = ValueError("deep")
    model = nn.Sequential(Probe(), nn.Sequential(Probe(), Broken(error)))
    model[1].eval()
    flags = training_flags(model)
    before = snapshot(model)
    with pytest.raises(ValueError) as raised:
        crawl_module(model, (3,), custom_modules=SCALE, custom_mapping=MUL)
    assert raised.value is error
    assert training_flags(model) == flags
    assert_unchanged(model, before)


def test_caller_hooks_survive_and_run_once():
    tree = mixed_tree()
    seen = []
    handles = [tree.a.register_forward_hook(lambda m, i, o: seen.append("post")),
               tree.register_forward_pre_hook(lambda m, i: seen.append("pre"))]
    before = snapshot(tree)
    analyze(tree, (3,))
    assert seen == ["pre", "post"]
    assert_unchanged(tree, before)
    for handle in handles:
        handle.remove()
    assert all(not getattr(m, attr) for m in tree.modules() for attr in HOOK_DICTS)


def test_no_hooks_buffers_attributes_or_state_are_added_in_any_mode():
    model = nn.Sequential(Scale(), DirectWork(), Opaque(), nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Dropout(0.5))
    model[3].bias.requires_grad_(False)
    model.train()
    before = snapshot(model)
    analyze(model, (3,), custom_modules=SCALE, custom_mapping=MUL)
    assert_unchanged(model, before)
    analyze(model, (3,), custom_modules=SCALE, mode="structure")
    assert_unchanged(model, before)
    analyze(model, (3,), custom_modules=SCALE, custom_mapping=MUL, memory=True, as_device="cpu")  # on stand-ins
    assert_unchanged(model, before)
    with pytest.raises(IncompleteAnalysisError):
        crawl_module(model, (3,), strict=True)
    assert_unchanged(model, before)


def test_a_caught_failure_in_a_caller_pre_hook_does_not_break_the_analysis():
    def refuse(module, args):
        raise ValueError("the caller's pre-hook refuses")

    class Tolerant(nn.Module):
        def __init__(self):
            super().__init__()
            self.guarded, self.body = Scale(), Scale()

        def forward(self, x):
            with contextlib.suppress(ValueError):
                self.guarded(x)
            return self.body(x)

    model = Tolerant()
    model.guarded.register_forward_pre_hook(refuse)
    model(torch.ones(3))  # the model itself runs fine
    report = analyze(model, (3,), custom_modules=SCALE)
    body = next(layer for layer in report["layers"] if layer["path"] == "body")
    assert body["parent"] == {"path": "", "call_index": 0} and body["depth"] == 1
    assert report["totals"]["module_flops"]["known_value"] >= 3


def test_a_caught_child_failure_is_recorded_and_later_siblings_still_count():
    class Fails(nn.Module):
        def forward(self, x):
            raise RuntimeError("caught by the parent")

    class Tolerant(nn.Module):
        def __init__(self):
            super().__init__()
            self.bad, self.good = Fails(), Scale()

        def forward(self, x):
            with contextlib.suppress(RuntimeError):
                self.bad(x)
            return self.good(x)

    called = []
    handlers = {**SCALE, Fails: ModuleHandler(lambda call: called.append(call) or {})}
    report = analyze(Tolerant(), (4,), custom_modules=handlers)
    bad, good = (next(layer for layer in report["layers"] if layer["path"] == p) for p in ("bad", "good"))
    assert called == []
    assert bad["output"] == {"kind": "failed"}
    assert bad["metrics"] and all(result["status"] == "unavailable" for result in bad["metrics"].values())
    assert good["metrics"]["module_flops"]["value"] == 4 and good["metrics"]["module_flops"]["status"] == "complete"
    errors = [item for item in report["diagnostics"] if item["code"] == "module_forward_error"]
    assert [(item["path"], item["call_index"]) for item in errors] == [("bad", 0)]
    assert report["totals"]["module_flops"] == {**report["totals"]["module_flops"], "status": "partial",
                                                "known_value": 4}


@pytest.mark.parametrize("mode", ["full", "structure"])
def test_a_caught_failure_keeps_its_positional_arguments_but_not_its_keywords(mode):
    """The documented limit: PyTorch's global hooks see a call's keyword arguments only when it completes."""

    class Fails(nn.Module):
        def forward(self, x, *, scale=1.0):
            raise RuntimeError("caught by the parent")

    class Tolerant(nn.Module):
        def __init__(self):
            super().__init__()
            self.bad = Fails()

        def forward(self, x):
            with contextlib.suppress(RuntimeError):
                self.bad(x, scale=torch.ones(2))
            return x

    report = analyze(Tolerant(), (4,), mode=mode)
    bad = report["layers"][1]
    assert bad["output"] == {"kind": "failed"}
    assert bad["input"] == {"args": [{"kind": "tensor", "shape": [1, 4], "dtype": "float32", "device": "cpu",
                                      "requires_grad": False}], "kwargs": []}


class Remember(nn.Module):
    """Keeps only weak references to its outputs, and checks which earlier ones are still alive."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def forward(self, x):
        self.log.append(("alive before", [ref() is not None for ref in self.log_refs()]))
        y = x * 3
        self.log.append(("ref", weakref.ref(y)))
        return y

    def log_refs(self):
        return [entry for kind, entry in self.log if kind == "ref"]


@pytest.mark.parametrize("mode", ["full", "structure"])
def test_activations_are_released_as_the_forward_goes(mode):
    log = []
    model = nn.Sequential(*(Remember(log) for _ in range(4)))
    analyze(model, (8,), custom_modules={Remember: ModuleHandler(estimate_scale)}, mode=mode)
    # In the fourth call, the outputs of the first two calls are garbage: only the model could hold them.
    alive = [entry for kind, entry in log if kind == "alive before"]
    assert alive[3][:2] == [False, False]
    gc.collect()
    assert all(entry() is None for kind, entry in log if kind == "ref")


# -- layer-call records -------------------------------------------------------------------------------------------------------

def test_a_caller_pre_hook_that_replaces_the_arguments_is_seen_in_the_input():
    model = nn.Sequential(nn.Linear(4, 4))
    model[0].register_forward_pre_hook(lambda module, args: (args[0][:, :4].expand(3, 4),))
    report = analyze(model, (4,))
    assert report["layers"][1]["input"]["args"][0]["shape"] == [3, 4]
    assert report["layers"][1]["output"]["shape"] == [3, 4]


def global_state() -> dict[str, Any]:
    """Every global table an analysis touches: PyTorch's global module hook tables (each ``_global_*`` dict of
    ``torch.nn.modules.module``, the ``with_kwargs`` and ``always_call`` flags included), the dispatch-mode stack,
    the autograd saved-tensor hook stack and the grad mode."""
    from torch.nn.modules import module as torch_module
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    tables = {name: dict(value) for name, value in vars(torch_module).items()
              if name.startswith("_global_") and isinstance(value, dict)}
    return {"tables": tables, "dispatch_modes": _get_current_dispatch_mode_stack(),
            "saved_tensor_hooks": torch._C._autograd._top_saved_tensors_default_hooks(False),
            "grad": torch.is_grad_enabled()}


@pytest.mark.parametrize("mode", ["full", "structure"])
def test_every_global_table_is_as_found_after_each_analysis_even_after_errors(mode: str):
    before = global_state()
    assert before["tables"]["_global_forward_hooks_with_kwargs"] is not None
    for _ in range(3):
        crawl_module(nn.Linear(2, 2), (2,), mode=mode)
        assert global_state() == before
        with pytest.raises(RuntimeError, match="cannot be multiplied"):
            crawl_module(nn.Linear(2, 2), args=(torch.ones(3),), mode=mode)
        assert global_state() == before


def test_records_follow_call_start_order_with_paths_depths_and_parents():
    model = nn.Sequential(Scale(), nn.Sequential(Scale(), Scale()))
    report = analyze(model, (2,), custom_modules=SCALE)
    rows = [(layer["path"], layer["call_index"], layer["name"], layer["depth"], layer["parent"], layer["leaf"])
            for layer in report["layers"]]
    root, one = {"path": "", "call_index": 0}, {"path": "1", "call_index": 0}
    assert rows == [("", 0, "", 0, None, False), ("0", 0, "0", 1, root, True), ("1", 0, "1", 1, root, False),
                    ("1.0", 0, "0", 2, one, True), ("1.1", 0, "1", 2, one, True)]
    assert report["layers"][1]["type"] == f"{__name__}.Scale"
    assert report["layers"][0]["type"] == "torch.nn.modules.container.Sequential"


def test_a_shared_module_called_twice_gives_two_records():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = Scale()

        def forward(self, x, y):
            return self.block(x), self.block(y)

    report = analyze(Twice(), [(3,), (2,)], custom_modules=SCALE)
    calls = [layer for layer in report["layers"] if layer["path"] == "block"]
    assert [layer["call_index"] for layer in calls] == [0, 1]
    assert [layer["input"]["args"][0]["shape"] for layer in calls] == [[1, 3], [1, 2]]
    assert [layer["metrics"]["module_flops"]["value"] for layer in calls] == [3, 2]
    assert report["totals"]["module_flops"]["value"] == 3 + 2


def test_subtree_ownership_is_recorded_on_the_owner_and_the_covered_rows():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.first, self.second = Scale(), Scale()

        def forward(self, x):
            return self.second(self.first(x))

    def estimate_pair(call: ModuleCall):
        return {"module_flops": 2 * call.output.numel(), "dmas": 4 * call.output.numel()}

    owner = ModuleHandler(estimate_pair, subtree_metrics=frozenset({"module_flops", "dmas"}))
    report = analyze(Pair(), (3,), custom_modules={**SCALE, Pair: owner})
    root, first, second = report["layers"]
    assert root["metric_ownership"] == {"module_flops": "subtree", "dmas": "subtree"}
    assert root["metrics"]["module_flops"]["scope"] == "subtree" and root["metrics"]["module_flops"]["value"] == 6
    for child in (first, second):
        assert "module_flops" not in child["metrics"] and "dmas" not in child["metrics"]
        assert child["metric_owners"] == {"dmas": {"path": "", "call_index": 0},
                                          "module_flops": {"path": "", "call_index": 0}}
        assert child["metrics"]["macs"]["value"] == 0 and child["metric_ownership"]["macs"] == "module_call"
    assert report["totals"]["module_flops"]["value"] == 6 and report["totals"]["dmas"]["value"] == 12


def test_tied_parameters_are_attributed_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Linear(4, 4, bias=False)
            self.decoder = nn.Linear(4, 4, bias=False)
            self.decoder.weight = self.encoder.weight

        def forward(self, x):
            return self.decoder(self.encoder(x))

    report = analyze(Tied(), (4,))
    counts = {layer["path"]: layer["parameters"]["count"] for layer in report["layers"]}
    assert counts == {"": 0, "encoder": 16, "decoder": 0}
    assert report["totals"]["parameters"] == {"total": 16, "trainable": 16, "frozen": 0, "bytes": 16 * 4}


def test_parameter_and_buffer_statistics_per_record_and_in_totals():
    class Stats(nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = nn.Linear(3, 2).double()
            self.dense.bias.requires_grad_(False)
            self.register_buffer("steps", torch.zeros(5, dtype=torch.float16))

        def forward(self, x):
            return self.dense(x)

    report = analyze(Stats(), (3,))
    root, dense = report["layers"]
    assert report["inputs"]["args"][0]["dtype"] == "float64"
    assert root["parameters"] == {"count": 0, "trainable": 0, "frozen": 0, "bytes": 0}
    assert root["buffers"] == {"count": 5, "bytes": 5 * 2}
    assert dense["parameters"] == {"count": 3 * 2 + 2, "trainable": 6, "frozen": 2, "bytes": 8 * 8}
    assert dense["buffers"] == {"count": 0, "bytes": 0}
    assert report["totals"]["parameters"] == {"total": 8, "trainable": 6, "frozen": 2, "bytes": 64}
    assert report["totals"]["buffers"] == {"total": 5, "bytes": 10}



def test_modules_a_forward_adds_or_replaces_are_counted_in_the_totals():
    class Growing(nn.Module):
        """Registers a layer on its first call, and swaps its first layer for a larger one on its second."""

        def __init__(self):
            super().__init__()
            self.first = nn.Linear(2, 2)

        def forward(self, x):
            if "late" not in self._modules:
                self.late = nn.Linear(2, 2)
            elif self.first.out_features == 2:
                self.first = nn.Linear(2, 3)
            return self.late(self.first(x)[:, :2])

    model = Growing()
    added = crawl_module(model, args=(torch.ones(1, 2),))
    assert added["totals"]["parameters"]["total"] == 6 + 6  # "late" ran unobserved, but its parameters exist
    assert crawl_module(model, args=(torch.ones(1, 2),))["totals"]["parameters"]["total"] == 9 + 6  # replaced
    assert crawl_module(model, args=(torch.ones(1, 2),))["totals"]["parameters"]["total"] == 9 + 6  # unchanged

# -- incomplete metrics ----------------------------------------------------------------------------------------------------------

def test_an_unsupported_leaf_is_partial_or_unavailable_never_zero():
    report = analyze(nn.Sequential(Scale(), Opaque()), (4,), custom_modules=SCALE)
    leaf = next(layer for layer in report["layers"] if layer["path"] == "1")
    for name in ("receptive_field", "effective_stride", "effective_padding"):
        assert leaf["metrics"][name]["status"] == "unavailable"
    for name in ("module_flops", "macs", "dmas"):
        assert leaf["metrics"][name]["status"] in ("partial", "unavailable")
        assert report["totals"][name]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] == 4 and report["totals"]["dmas"]["known_value"] == 8
    unsupported = [item for item in report["diagnostics"] if item["code"] == "unsupported_module"]
    assert [(item["path"], item["call_index"]) for item in unsupported] == [("1", 0)]
    assert "torchscan_testing.OpaqueLeaf" in unsupported[0]["message"]


def test_direct_work_of_a_composite_without_a_formula_is_partial_with_a_diagnostic():
    report = analyze(DirectWork(), (4,), custom_modules=SCALE)
    root = report["layers"][0]
    for name in ("module_flops", "macs", "dmas"):
        assert root["metrics"][name]["status"] == "partial"
        assert report["totals"][name]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] == 4
    direct = [item for item in report["diagnostics"] if item["code"] == "unestimated_direct_work"]
    assert {item["metric"] for item in direct} == {"module_flops", "macs", "dmas"}
    for item in direct:
        assert (item["path"], item["call_index"]) == ("", 0)
        assert OPAQUE in item["message"] and f"{__name__}.DirectWork" in item["message"]
    assert not any(item.get("path") == "scale" for item in report["diagnostics"])


def test_views_in_a_composite_forward_do_no_module_view_work():
    class Reshaping(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = Scale()

        def forward(self, x):
            return self.scale(x.flatten(1)[:, :4].view(2, 2))

    report = analyze(Reshaping(), (2, 3), custom_modules=SCALE)
    assert not any(item["code"] == "unestimated_direct_work" for item in report["diagnostics"])
    assert report["totals"]["module_flops"]["status"] == "complete"
    assert report["totals"]["module_flops"]["value"] == 4


def test_a_rare_aten_operator_in_a_composite_is_named_in_the_diagnostic():
    assert torch.ops.aten.special_bessel_j0 not in FUNCTIONAL_ESTIMATES, "pick an ATen operator without a formula"

    class Bessel(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = Scale()

        def forward(self, x):
            return torch.special.bessel_j0(self.scale(x))

    report = analyze(Bessel(), (4,), custom_modules=SCALE)
    direct = [item for item in report["diagnostics"] if item["code"] == "unestimated_direct_work"]
    assert direct and all("aten.special_bessel_j0" in item["message"] for item in direct)
    assert report["totals"]["macs"]["status"] == "partial"


# -- strict -------------------------------------------------------------------------------------------------------------------

def test_strict_raises_with_the_full_report_when_a_metric_is_incomplete():
    with pytest.raises(IncompleteAnalysisError) as raised:
        crawl_module(DirectWork(), (4,), custom_modules=SCALE, strict=True)
    report = raised.value.report
    validate_report(report)
    assert report == analyze(DirectWork(), (4,), custom_modules=SCALE)
    assert "totals.module_flops" in str(raised.value)
    assert any(item["code"] == "unestimated_direct_work" for item in report["diagnostics"])


def test_strict_passes_a_complete_analysis():
    report = analyze(nn.Sequential(Scale(), Scale()), (4,), custom_modules=SCALE, custom_mapping=MUL, strict=True)
    assert report["totals"]["module_flops"] == {"status": "complete", "value": 8, "known_value": 8, "unit": "FLOPs",
                                                "scope": "model", "method": "sum_of_layer_estimates"}
    assert report["totals"]["operator_flops"]["value"] == 8
    assert report["diagnostics"] == []


# -- structure mode ---------------------------------------------------------------------------------------------------------------

def test_structure_mode_runs_the_forward_but_no_handler_or_operator_formula():
    estimates, formulas = [], []
    handlers = {Scale: ModuleHandler(lambda call: estimates.append(call) or estimate_scale(call))}
    mapping = {torch.ops.aten.mul: lambda *shapes, out_shape, **kw: formulas.append(out_shape) or 0}
    tree = Tree()
    model = nn.Sequential(Scale(), tree, DirectWork(), nn.Linear(3, 2))
    report = analyze(model, (3,), custom_modules=handlers, custom_mapping=mapping, mode="structure", strict=True)
    assert tree.calls == 1 and estimates == [] and formulas == []
    assert report["context"]["analysis_mode"] == "structure"
    for layer in report["layers"]:
        assert set(layer["metrics"]) == {"module_flops", "macs", "dmas", "receptive_field", "effective_stride",
                                         "effective_padding"}
        assert all(result["status"] == "not_requested" for result in layer["metrics"].values())
        assert all(result["status"] == "not_requested" for result in layer["operator_flops"].values())
    for name in ("module_flops", "macs", "dmas", "operator_flops"):
        assert report["totals"][name]["status"] == "not_requested"
    assert report["operator_flops"]["total"]["status"] == "not_requested"
    assert report["totals"]["parameters"]["total"] == 3 * 2 + 2
    assert [layer["path"] for layer in report["layers"]] == ["", "0", "1", "1.a", "1.b", "1.b.0", "1.b.1", "2",
                                                             "2.scale", "3"]


@pytest.mark.parametrize("mode", ["full", "structure"])
def test_one_edit_of_a_report_changes_no_other_place(mode):
    """Users annotate, merge and trim reports: records that describe equal things are still separate objects."""
    model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(5)))
    report = analyze(model, (4,), mode=mode)
    before = json.loads(json.dumps(report))
    report["layers"][1]["output"]["shape"][1] = 999
    report["layers"][1]["metrics"]["macs"]["status"] = "edited"
    report["layers"][1]["operator_flops"]["direct"]["value"] = -1
    report["layers"][1]["parent"]["path"] = "edited"
    report["layers"][1]["parameters"]["count"] = -1
    report["totals"]["operator_flops"]["value"] = -1
    after = json.loads(json.dumps(report))
    for index in (0, 2, 3, 4, 5):
        assert after["layers"][index] == before["layers"][index]
    assert after["operator_flops"] == before["operator_flops"] and after["inputs"] == before["inputs"]


def test_calls_that_count_alike_have_equal_operator_flop_results():
    report = analyze(nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3), Opaque()), (3,))
    _, first, second, opaque_call = (layer["operator_flops"] for layer in report["layers"])
    assert first == second and first["direct"] is not second["direct"]
    assert opaque_call["direct"]["status"] == "partial"


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nested_and_meta_tensors_are_described_as_their_kind():
    """A strided nested tensor has the plain tensor type but no single shape: it is described as one."""
    nested = torch.nested.nested_tensor([torch.rand(2, 3), torch.rand(4, 3)])
    _, first, second = crawl_module(nn.Sequential(Scale(), Scale()), args=(nested,), mode="structure")["layers"]
    assert first["input"]["args"][0]["kind"] == second["output"]["kind"] == "nested_tensor"
    meta = crawl_module(nn.Sequential(nn.ReLU(), nn.ReLU()), args=(torch.empty(2, 3, device="meta"),),
                        mode="structure")["layers"]
    assert meta[1]["output"] == meta[2]["output"] and meta[1]["output"]["device"] == "meta"


class KeywordScale(nn.Module):
    def forward(self, x, scale=1.0):
        return x * scale


class TwoScales(nn.Module):
    """The same input twice, once with a keyword argument."""

    def __init__(self):
        super().__init__()
        self.plain, self.keyword = KeywordScale(), KeywordScale()

    def forward(self, x):
        return self.plain(x) + self.keyword(x, scale=2.0)


def test_a_call_with_keyword_arguments_describes_them_beside_its_positional_ones():
    _, plain, keyword = analyze(TwoScales(), (4,))["layers"]
    assert plain["input"] == {"args": [keyword["input"]["args"][0]], "kwargs": []}
    assert keyword["input"]["kwargs"] == [{"key": "scale", "value": {"kind": "scalar", "type": "float"}}]


# -- determinism and serialization ---------------------------------------------------------------------------------------------------

def test_two_analyses_give_identical_json():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), Scale(), DirectWork(), Opaque(), nn.LayerNorm(5), nn.GELU())
    first = analyze(model, (6,), custom_modules=SCALE, custom_mapping=MUL)
    second = analyze(model, (6,), custom_modules=SCALE, custom_mapping=MUL)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert json.dumps(first) == json.dumps(second)
    assert "0x" not in json.dumps(first)  # no object addresses


def test_reports_depend_on_structure_not_on_weight_values_or_instances():
    def build(seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(6, 5), nn.BatchNorm1d(5), Scale(), DirectWork())

    first = analyze(build(1), (6,), custom_modules=SCALE)
    second = analyze(build(2), (6,), custom_modules=SCALE)
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_training_mode_randomness_is_off_during_the_analysis():
    model = nn.Sequential(nn.Dropout(0.5), Scale())
    model.train()
    torch.manual_seed(7)
    before = torch.get_rng_state()
    analyze(model, (16,), custom_modules=SCALE)
    assert torch.equal(torch.get_rng_state(), before)
    assert model.training and model[0].training


def test_diagnostics_are_sorted_deterministically():
    report = analyze(nn.Sequential(Opaque(), DirectWork(), Opaque()), (4,), custom_modules=SCALE)
    keys = [(item.get("path", ""), item.get("call_index", -1), item["code"], item.get("metric") or "")
            for item in report["diagnostics"]]
    assert keys == sorted(keys)


# -- meta device ----------------------------------------------------------------------------------------------------------------

class Projection(nn.Module):
    def __init__(self, features: int, out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out, features))

    def forward(self, x):
        return x @ self.weight.T


def estimate_projection(call: ModuleCall):
    rows = call.output.numel() // call.output.shape[-1]
    out, features = call.module.weight.shape
    return {"macs": rows * features * out, "module_flops": 2 * rows * features * out,
            "dmas": rows * features + out * features + rows * out}


def build_mixed():
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), Projection(16, 4), Scale())


def test_a_meta_model_is_analyzed_like_a_real_one():
    handlers = {**SCALE, Projection: ModuleHandler(estimate_projection)}
    cpu = analyze(build_mixed(), (8,), custom_modules=handlers)
    with torch.device("meta"):
        meta_model = build_mixed()
    meta = analyze(meta_model, (8,), custom_modules=handlers)
    assert meta["inputs"]["args"][0]["device"] == "meta"
    assert meta["context"]["devices"] == ["meta"]
    assert meta["totals"]["parameters"] == cpu["totals"]["parameters"]
    assert meta["totals"]["parameters"]["total"] == (8 * 16 + 16) + 2 * 16 + 16 * 4
    for name in ("module_flops", "macs", "dmas", "operator_flops"):
        assert meta["totals"][name] == cpu["totals"][name], name
    projection = next(layer for layer in meta["layers"] if layer["path"] == "3")
    assert projection["metrics"]["macs"]["value"] == 1 * 16 * 4
    assert [layer["metrics"] for layer in meta["layers"]] == [layer["metrics"] for layer in cpu["layers"]]


# -- bad input ------------------------------------------------------------------------------------------------------------------

class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x


@pytest.mark.parametrize("model", [lambda x: x, nn.Linear, "resnet18", None])
def test_model_must_be_a_module_instance(model):
    with pytest.raises(TypeError, match="model"):
        crawl_module(model, (3,))


@pytest.mark.parametrize("options, error, word", [
    ({"mode": "fast"}, ValueError, "mode"),
    ({"mode": None}, ValueError, "mode"),
    ({"strict": "yes"}, TypeError, "strict"),
    ({"strict": 1}, TypeError, "strict"),
    ({"custom_modules": [Scale]}, TypeError, "custom_modules"),
    ({"custom_modules": {"Scale": ModuleHandler(estimate_scale)}}, TypeError, "custom_modules"),
    ({"custom_modules": {int: ModuleHandler(estimate_scale)}}, TypeError, "custom_modules"),
    ({"custom_modules": {Scale: estimate_scale}}, TypeError, "custom_modules"),
    ({"custom_mapping": [torch.ops.aten.mul]}, TypeError, "custom_mapping"),
    ({"custom_mapping": {"aten.mul": mul_flops}}, TypeError, "custom_mapping"),
    ({"custom_mapping": {torch.ops.aten.mul: 3}}, TypeError, "custom_mapping"),
    ({"custom_mapping": {torch.ops.aten.mul.Tensor: mul_flops}}, TypeError, "custom_mapping"),
])
def test_bad_options_are_refused_before_the_model_runs(options, error, word):
    model = Counting()
    with pytest.raises(error, match=word):
        crawl_module(model, (3,), **options)
    assert model.calls == 0


# -- edge cases found in review ------------------------------------------------------------------------------------


class NumpyDense(nn.Module):
    """A leaf whose work happens in numpy: invisible to dispatch."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = np.ones((8, 8), np.float32)

    def forward(self, x):
        return torch.from_numpy(x.numpy() @ self.weight)


def test_an_unsupported_leaf_whose_work_dispatch_cannot_see_is_never_a_complete_zero():
    report = crawl_module(NumpyDense(), (8,))
    validate_report(report)
    for name in ("module_flops", "macs", "dmas"):
        assert report["totals"][name]["status"] in ("partial", "unavailable"), name
        assert report["totals"][name]["value"] is None
    with pytest.raises(IncompleteAnalysisError):
        crawl_module(NumpyDense(), (8,), strict=True)


class LoRALinear(nn.Linear):
    """A built-in type whose subclass overrides forward: the base formula would miss the low-rank path."""

    def __init__(self, features: int, rank: int) -> None:
        super().__init__(features, features)
        self.down = nn.Parameter(torch.zeros(rank, features))
        self.up = nn.Parameter(torch.zeros(features, rank))

    def forward(self, x):
        return super().forward(x) + F.linear(F.linear(x, self.down), self.up)


def test_a_subclass_whose_forward_adds_work_does_not_keep_the_builtin_formula():
    """The parent's formula is offered (verified inheritance) but the low-rank matmuls make the check fail."""
    report = crawl_module(LoRALinear(16, 4), (16,))
    macs = report["totals"]["macs"]
    assert macs["status"] == "partial"  # observed operators are a lower bound for a mismatched formula
    assert macs["known_value"] == 16 * 16 + 16 * 4 + 4 * 16  # every observed dot product is in the bound
    [finding] = report["diagnostics"]
    assert (finding["code"], finding["severity"]) == ("handler_signature_mismatch", "error")
    assert "torch.nn.modules.linear.Linear it inherits gives macs 256, but the operators the call ran come to 384" \
        in finding["message"]


def test_modules_called_from_other_threads_make_every_total_a_lower_bound():
    class Threaded(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = nn.Linear(4, 4)

        def forward(self, x):
            with ThreadPoolExecutor(1) as pool:
                return pool.submit(self.head, x).result()

    report = crawl_module(Threaded(), (4,))
    validate_report(report)
    assert "unobserved_thread" in [d["code"] for d in report["diagnostics"]]
    for name in ("module_flops", "macs", "dmas", "operator_flops"):
        assert report["totals"][name]["status"] in ("partial", "unavailable"), name


def test_metric_owners_do_not_depend_on_unrelated_registrations():
    class Unused(nn.Module):
        pass

    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
    model = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
    plain = crawl_module(model, (5, 8))
    registered = crawl_module(model, (5, 8), custom_modules={Unused: ModuleHandler(lambda call: {})})
    assert [row.get("metric_owners") for row in plain["layers"]] == \
        [row.get("metric_owners") for row in registered["layers"]]
    assert all(owner == {"path": "", "call_index": 0}
               for row in plain["layers"][1:] for owner in row["metric_owners"].values())


def test_structure_mode_reports_a_caught_child_failure():
    class Fails(nn.Module):
        def forward(self, x):
            raise ValueError("no")

    class Tolerant(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fails = Fails()

        def forward(self, x):
            with contextlib.suppress(ValueError):
                self.fails(x)
            return x

    report = crawl_module(Tolerant(), (2,), mode="structure")
    assert [d["code"] for d in report["diagnostics"]] == ["module_forward_error"]
    assert report["layers"][1]["output"] == {"kind": "failed"}


def test_a_self_referential_output_is_described_without_recursing_forever():
    class Cache(nn.Module):
        def forward(self, x, state):
            state.append(state)
            return x

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cache = Cache()

        def forward(self, x):
            state: list = []
            return self.cache(x, state), state

    report = crawl_module(Model(), (2,))
    validate_report(report)
    assert report["layers"][0]["output"]["items"][1] == {"kind": "list", "items": [{"kind": "recursive",
                                                                                     "type": "list"}]}


def test_context_labels_caller_handlers_as_their_estimates_are_labelled():
    def estimate(call):
        return {"module_flops": 1}

    report = crawl_module(nn.ReLU(), (2,), custom_modules={nn.ReLU: ModuleHandler(estimate, method="mine")})
    label = report["context"]["custom_modules"][0]["method"]
    assert label == report["layers"][0]["metrics"]["module_flops"]["method"]
    assert label.startswith("custom_module_handler:")


def test_totals_beyond_2_to_the_53_stay_exact():
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(2**16, 2**16, bias=False), nn.Linear(2**16, 1, bias=False))
    report = crawl_module(model, (2**21, 2**16))
    layer_macs = [row["metrics"]["macs"]["value"] for row in report["layers"][1:]]
    assert report["totals"]["macs"]["value"] == sum(layer_macs) == 2**21 * (2**32 + 2**16)
