"""The extension contract (spec/extending.txt), registration and the call: registrations belong to one analysis,
the complete call context a callback receives, matching module types by the closest class in the MRO, and the
operator formulas of ``custom_mapping``.

Every test names the sentence of the guide (quoted or closely paraphrased) that it proves, so each file reads as
the mapping "sentence -> test"; ``extension_fixtures.py`` indexes the guide's sections by file. Every report
produced here is validated against the shipped schema (``tests/conftest.py``).
"""

from __future__ import annotations

import dataclasses
import io
from abc import ABCMeta
from typing import Any

import pytest
import torch
from extension_fixtures import (
    COUNT_MUL,
    FIELDS,
    OPAQUE_NAME,
    Double,
    DoublePair,
    Recorder,
    Scaled,
    ScaledTwice,
    X,
    analyze_call,
    elementwise_flops,
    every_field,
    label,
    metric,
    opaque,
    relu_builtin,
    row,
    thousandfold_flops,
)
from torch import nn
from torch.utils import flop_counter

import torchscan
from torchscan import ModuleCall, ModuleHandler, crawl_module, summary
from torchscan.builtin_handlers import DEFAULT_HANDLERS
from torchscan.schema import validate_report

# == Registrations belong to one analysis ==========================================================================

def test_registrations_belong_to_that_analysis_only():
    # "Registrations belong to that analysis only: they do not change TorchScan's formulas."
    builtins_before = dict(DEFAULT_HANDLERS)
    custom = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"module_flops": 123})})
    plain = analyze_call(nn.ReLU(), X)
    assert metric(custom, "", "module_flops")["value"] == 123
    assert metric(plain, "", "module_flops")["method"] == "formula:activation"
    assert metric(plain, "", "module_flops")["value"] != 123
    assert builtins_before == DEFAULT_HANDLERS


def test_custom_mapping_is_per_analysis_and_leaves_torch_registry_alone():
    # "Use custom_mapping on the same call when you also need operator FLOP overrides." The override lives in that
    # analysis: a second analysis without it does not see it, and PyTorch's global flop_registry is unchanged.
    registry_before = dict(flop_counter.flop_registry)
    with_mapping = analyze_call(Double(), X, custom_mapping={torch.ops.aten.mul: thousandfold_flops})
    without = analyze_call(Double(), X)
    assert with_mapping["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 1, "flops": 8000}]
    assert with_mapping["operator_flops"]["custom_formulas"] == ["aten.mul"]
    assert without["operator_flops"]["custom_formulas"] == []
    assert without["totals"]["operator_flops"]["known_value"] != 8000
    assert flop_counter.flop_registry == registry_before
    assert torch.ops.aten.mul not in flop_counter.flop_registry


def test_two_views_remain_separate():
    # "The two views remain separate": a module estimate never changes the operator count, and vice versa.
    handler = ModuleHandler(lambda call: every_field(1000))
    report = analyze_call(Double(), X, custom_modules={Double: handler}, custom_mapping=COUNT_MUL)
    assert report["totals"]["module_flops"]["value"] == 1000
    assert report["totals"]["operator_flops"]["value"] == 8
    assert report["totals"]["module_flops"]["method"] != report["totals"]["operator_flops"]["method"]


def test_summary_accepts_both_registrations_and_returns_the_same_report():
    # "Replace crawl_module with summary to print the table and receive the same report; both accept
    # custom_modules and custom_mapping."
    options = {"args": (X,), "custom_modules": {Double: ModuleHandler(lambda call: every_field(8))},
               "custom_mapping": COUNT_MUL}
    printed = io.StringIO()
    shown = summary(Double(), file=printed, **options)
    validate_report(shown)  # the public helper itself, once
    assert shown == crawl_module(Double(), **options)
    assert shown["totals"]["module_flops"]["value"] == 8
    assert "Double" in printed.getvalue()


class Head(nn.Module):
    """A custom head with nested outputs and an operator no formula knows."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 3)

    def forward(self, hidden):
        logits = self.proj(hidden)
        return {"logits": logits, "extras": (opaque(logits),)}


class EncoderClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = Head()

    def forward(self, tokens):
        return self.head(self.encoder(tokens))


def estimate_head(call: ModuleCall) -> dict[str, Any]:
    hidden, logits = call.args[0], call.output["logits"]
    macs = logits.numel() * hidden.shape[-1]
    # 2 FLOPs per MAC, a bias add per logit, and (our convention) 1 FLOP per logit for the opaque operator.
    return {"macs": macs, "module_flops": 2 * macs + 2 * logits.numel(),
            "dmas": hidden.numel() + 8 * 3 + 3 + 3 * logits.numel()}


def test_end_to_end_native_encoder_with_a_custom_head():
    # "For an end-to-end example, combine a native Transformer encoder with a custom head. It shows subtree
    # ownership, nested outputs, and partial operator counts in one report."
    tokens = torch.ones(5, 1, 8)
    report = analyze_call(EncoderClassifier(), tokens, custom_modules={
        Head: ModuleHandler(estimate_head, frozenset({"module_flops", "macs", "dmas"}))})
    encoder, head = row(report, "encoder"), row(report, "head")
    assert encoder["metric_ownership"] == dict.fromkeys(FIELDS, "subtree")
    assert encoder["metrics"]["macs"]["method"] == "formula:transformer"
    assert head["metric_ownership"] == dict.fromkeys(("module_flops", "macs", "dmas"), "subtree")
    head_owner = {"path": "head", "call_index": 0}
    assert row(report, "head.proj")["metric_owners"] == {name: head_owner for name in ("module_flops", "macs", "dmas")}
    assert [item["key"] for item in head["output"]["items"]] == ["logits", "extras"]
    assert head["output"]["items"][1]["value"]["kind"] == "tuple"
    assert report["totals"]["macs"] == {**report["totals"]["macs"], "status": "complete",
                                        "value": encoder["metrics"]["macs"]["value"] + 5 * 3 * 8}
    assert report["totals"]["operator_flops"]["status"] == "partial"
    assert [item["operator"] for item in report["operator_flops"]["uncounted"]] == [OPAQUE_NAME]


# == The complete call context ======================================================================================

class Mixer(nn.Module):
    """Nested containers in and out, a non-tensor argument, and a keyword with a default."""

    def __init__(self) -> None:
        super().__init__()
        self.returned: Any = None

    def forward(self, pair, *, weights: dict, note: str, scale: float = 1.0):
        left, right = pair
        self.returned = {"sum": [left + right * weights["w"]], "note": note}
        return self.returned


def test_call_holds_the_actual_objects_of_the_invocation():
    # "The frozen ModuleCall contains the actual module, positional args, keyword kwargs, and complete output.
    # Nested containers, non-tensor values ... are preserved. These are the objects from that invocation."
    callback = Recorder({"module_flops": 0})
    model = Mixer()
    pair = (torch.ones(2, 3), torch.ones(2, 3))
    weights = {"w": torch.full((2, 3), 2.0)}
    report = crawl_module(model, args=(pair,), kwargs={"weights": weights, "note": "hello"},
                          custom_modules={Mixer: ModuleHandler(callback)})
    validate_report(report)
    (call,) = callback.calls
    assert call.module is model
    assert call.args[0] is pair
    assert call.kwargs["weights"] is weights and call.kwargs["note"] == "hello"
    assert call.output is model.returned
    assert isinstance(call.output["sum"], list) and call.output["note"] == "hello"


def test_kwargs_only_calls_and_omitted_defaults():
    # "kwargs-only calls are preserved ... omitted default arguments are not inserted into args or kwargs."
    callback = Recorder({"module_flops": 0})
    pair = (torch.ones(2), torch.ones(2))
    report = crawl_module(Mixer(), kwargs={"pair": pair, "weights": {"w": 1.0}, "note": "n"},
                          custom_modules={Mixer: ModuleHandler(callback)})
    validate_report(report)
    (call,) = callback.calls
    assert call.args == ()
    assert list(call.kwargs) == ["pair", "weights", "note"]
    assert "scale" not in call.kwargs


def test_module_call_is_frozen():
    # "The frozen ModuleCall ..." (and "The frozen call wrapper does not make the referenced objects immutable").
    callback = Recorder({"module_flops": 0})
    analyze_call(Double(), X, custom_modules={Double: ModuleHandler(callback)})
    (call,) = callback.calls
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.output = None  # type: ignore[misc]
    assert isinstance(call.kwargs, dict)


def test_a_callback_can_choose_its_formula_from_actual_dtypes():
    # "A module callback can inspect actual tensor dtypes and choose a formula for each call."
    def by_dtype(call: ModuleCall) -> dict[str, Any]:
        per_element = 6 if call.args[0].dtype.is_complex else 1
        return {"module_flops": per_element * call.output.numel()}

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = Double()

        def forward(self, real, cplx):
            return self.scale(real), self.scale(cplx)

    report = analyze_call(Root(), torch.ones(4), torch.ones(4, dtype=torch.complex64),
                     custom_modules={Double: ModuleHandler(by_dtype)})
    assert metric(report, "scale", "module_flops", 0)["value"] == 1 * 4
    assert metric(report, "scale", "module_flops", 1)["value"] == 6 * 4


def test_registering_a_module_does_not_change_operator_counts():
    # "Complex support is supplied explicitly here; registering a model does not make every complex operator
    # complete." A module registration leaves the operator view exactly as it was.
    class ComplexMix(nn.Module):
        def forward(self, x):
            return opaque(x * (1 + 2j))

    x = torch.ones(4, dtype=torch.complex64)
    plain = analyze_call(ComplexMix(), x)
    registered = analyze_call(ComplexMix(), x, custom_modules={ComplexMix: ModuleHandler(lambda call: every_field(24))})
    assert registered["operator_flops"] == plain["operator_flops"]
    assert registered["totals"]["operator_flops"]["status"] == "partial"


def test_operator_override_applies_to_every_call_of_that_operator():
    # "The operator override applies to every aten.mul call in this analysis."
    report = analyze_call(DoublePair(), X, custom_mapping={torch.ops.aten.mul: thousandfold_flops})
    assert report["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 2, "flops": 2 * 8000}]


# == Matching ======================================================================================================

def tagged(tag: int) -> ModuleHandler:
    """A handler whose FLOPs estimate names it."""
    return ModuleHandler(lambda call: {"module_flops": tag})


def selected(model: nn.Module, custom_modules: dict) -> int:
    return metric(analyze_call(model, X, custom_modules=custom_modules), "", "module_flops")["value"]


def test_exact_class_wins_over_its_bases():
    # "Matching uses the closest registered class in the module's Python method resolution order: an exact class
    # wins, then its nearest registered base class."
    registrations = {Double: tagged(1), Scaled: tagged(2), ScaledTwice: tagged(3)}
    assert selected(ScaledTwice(), registrations) == 3
    assert selected(Scaled(), registrations) == 2
    assert selected(Double(), registrations) == 1


def test_nearest_registered_base_wins():
    # "... then its nearest registered base class."
    assert selected(ScaledTwice(), {Double: tagged(1), Scaled: tagged(2)}) == 2
    assert selected(ScaledTwice(), {Double: tagged(1)}) == 1


def test_mapping_insertion_order_does_not_affect_selection():
    # "Mapping insertion order does not affect selection."
    forward = {Double: tagged(1), Scaled: tagged(2)}
    backward = {Scaled: tagged(2), Double: tagged(1)}
    assert selected(ScaledTwice(), forward) == selected(ScaledTwice(), backward) == 2


class Left(nn.Module):
    def forward(self, x):
        return x * 2


class Right(nn.Module):
    def forward(self, x):
        return x * 3


class LeftRight(Left, Right):
    pass


class RightLeft(Right, Left):
    pass


def test_multiple_inheritance_follows_the_mro():
    # "This also defines precedence for multiple inheritance."
    registrations = {Right: tagged(2), Left: tagged(1)}
    assert selected(LeftRight(), registrations) == 1
    assert selected(RightLeft(), registrations) == 2


def test_virtual_subclasses_do_not_match():
    # "Virtual subclasses outside the MRO do not match."
    class Pluggable(nn.Module, metaclass=ABCMeta):
        pass

    Pluggable.register(Double)
    assert issubclass(Double, Pluggable)
    callback = Recorder({"module_flops": 5})
    report = analyze_call(Double(), X, custom_modules={Pluggable: ModuleHandler(callback)})
    assert callback.calls == []
    assert metric(report, "", "module_flops")["method"] != label(callback)


def test_registration_is_for_types_and_callbacks_branch_on_module_attributes():
    # "Registration is for module types, not individual instances; branch on call.module attributes if instances
    # need different formulas."
    with pytest.raises(TypeError):
        crawl_module(Double(), args=(X,), custom_modules={Double(): ModuleHandler(lambda call: {})})

    class Gain(nn.Module):
        def __init__(self, cost: int) -> None:
            super().__init__()
            self.cost = cost

        def forward(self, x):
            return x * self.cost

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cheap, self.dear = Gain(1), Gain(5)

        def forward(self, x):
            return self.dear(self.cheap(x))

    report = analyze_call(Two(), X, custom_modules={Gain: ModuleHandler(
        lambda call: {"module_flops": call.module.cost * call.output.numel()})})
    assert metric(report, "cheap", "module_flops")["value"] == 1 * 8
    assert metric(report, "dear", "module_flops")["value"] == 5 * 8


def test_caller_handler_beats_builtin_for_each_field_it_supplies():
    # "A caller handler takes precedence over a built-in formula for every field it supplies."
    builtin = relu_builtin(X)
    callback = Recorder({"module_flops": 7})
    report = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(callback)})
    metrics = row(report, "")["metrics"]
    assert metrics["module_flops"]["value"] == 7
    assert metrics["module_flops"]["method"] == label(callback)
    for name in FIELDS[1:]:
        assert metrics[name] == builtin[name]
        assert metrics[name]["method"] == "formula:activation"


def test_caller_handler_beats_the_linear_builtin_field_by_field():
    # Same sentence on nn.Linear: the caller's MACs win, the built-in supplies the other five fields.
    linear = nn.Linear(4, 3)
    x = torch.ones(2, 4)
    builtin = analyze_call(linear, x)["layers"][0]["metrics"]
    report = analyze_call(linear, x, custom_modules={nn.Linear: ModuleHandler(lambda call: {"macs": 1})})
    metrics = row(report, "")["metrics"]
    assert builtin["macs"]["value"] == 2 * 3 * 4  # the built-in's own count, replaced below
    assert metrics["macs"]["value"] == 1
    assert all(metrics[name] == builtin[name] for name in FIELDS if name != "macs")


# == Operator formulas ===============================================================================================

def test_operator_overloads_are_rejected_before_the_model_runs():
    # custom_mapping keys are operator packets (torch.ops.aten.sin), not overloads (torch.ops.aten.sin.default).
    class Counted(Double):
        runs = 0

        def forward(self, x):
            Counted.runs += 1
            return torch.sin(x)

    with pytest.raises(TypeError, match="aten.sin"):
        crawl_module(Counted(), args=(X,), custom_mapping={torch.ops.aten.sin.default: elementwise_flops})
    assert Counted.runs == 0


def test_caller_operator_formula_beats_the_builtin_one():
    # A caller's formula replaces TorchScan's and PyTorch's for that operator in this analysis.
    class Product(nn.Module):
        def forward(self, a):
            return torch.mm(a, a)

    square = torch.ones(3, 3)
    assert analyze_call(Product(), square)["operator_flops"]["by_operator"] == [
        {"operator": "aten.mm", "calls": 1, "flops": 2 * 3 * 3 * 3}]
    overridden = analyze_call(Product(), square, custom_mapping={torch.ops.aten.mm: lambda *a, out_shape, **k: 7})
    assert overridden["operator_flops"]["by_operator"] == [{"operator": "aten.mm", "calls": 1, "flops": 7}]


def test_public_api_exposes_the_extension_types():
    # "A ModuleHandler wraps one callback taking a ModuleCall and returning ModuleEstimates."
    assert {"ModuleCall", "ModuleEstimates", "ModuleHandler", "IncompleteAnalysisError"} <= set(torchscan.__all__)
    handler = ModuleHandler(lambda call: {})
    assert handler.subtree_metrics == frozenset()
    with pytest.raises(TypeError):
        ModuleHandler("not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ModuleHandler(lambda call: {}, frozenset({"flops"}))
