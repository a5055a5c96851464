"""The extension contract (spec/extending.txt), one or more tests per behavioural sentence.

Every test names the sentence (quoted or closely paraphrased) that it proves, so this file reads as the mapping
"sentence -> test". Sections follow the guide: registration per analysis; the complete call context; matching
and field-by-field precedence; numbers, None, MetricResult and omission; when callbacks run; subtree ownership;
validation and failure; strict mode; callback scope and limitations (no_grad, references, failed forwards,
structure mode, observed calls, expanded atomic boundaries); operator formulas. The guide's own examples run
verbatim in ``test_extending_examples.py``. Every report produced here is validated against the shipped schema.
Sentences that state the caller's obligations rather than TorchScan's behaviour (treat call objects as read-only,
serialize analyses sharing a model, keep formulas with reports, formulas are theoretical) have no test.

Fixtures are tiny modules defined below. ``Double`` (``x * 2``) has no built-in formula; ``nn.ReLU``,
``nn.LayerNorm`` and ``nn.Linear`` have built-ins, and the native Transformer modules have complete-call
built-ins that own their subtree. Where a test needs an inclusive built-in with known numbers, it registers one
for a test-only block in ``torchscan.formulas.DEFAULT_HANDLERS`` for the duration of the test.
"""

from __future__ import annotations

import dataclasses
import io
import math
import weakref
from abc import ABCMeta
from math import prod
from typing import Any

import jsonschema
import pytest
import torch
from torch import nn
from torch.utils import flop_counter

import torchscan
from torchscan import IncompleteAnalysisError, ModuleCall, ModuleHandler, crawl_module, summary
from torchscan.formulas import DEFAULT_HANDLERS
from torchscan.schema import report_schema, validate_report

FIELDS = ("module_flops", "macs", "dmas", "receptive_field", "effective_stride", "effective_padding")
UNITS = {"module_flops": "FLOPs", "macs": "MACs", "dmas": "DMAs", "receptive_field": "elements",
         "effective_stride": "elements", "effective_padding": "elements"}
ROOT = {"path": "", "call_index": 0}

#: The shipped report schema, compiled once: ``validate_report`` re-checks the schema itself on every call (about
#: 0.3 s), which would dominate this file; the validation of each report is the same.
SCHEMA = jsonschema.Draft202012Validator(report_schema())


# -- helpers --------------------------------------------------------------------------------------------------------

def analyze(model: nn.Module, *args: Any, **options: Any) -> dict[str, Any]:
    """crawl_module on a provided call, with the report checked against the schema."""
    report = crawl_module(model, args=args, **options)
    SCHEMA.validate(report)
    return report


def strict_failure(model: nn.Module, *args: Any, **options: Any) -> dict[str, Any]:
    """The report carried by the IncompleteAnalysisError of a strict analysis (schema-checked)."""
    with pytest.raises(IncompleteAnalysisError) as caught:
        crawl_module(model, args=args, strict=True, **options)
    SCHEMA.validate(caught.value.report)
    return caught.value.report


def row(report: dict[str, Any], path: str, call_index: int = 0) -> dict[str, Any]:
    (found,) = [layer for layer in report["layers"] if layer["path"] == path and layer["call_index"] == call_index]
    return found


def metric(report: dict[str, Any], path: str, name: str, call_index: int = 0) -> dict[str, Any]:
    return row(report, path, call_index)["metrics"][name]


def diagnostics(report: dict[str, Any], code: str, path: str | None = None) -> list[dict[str, Any]]:
    return [item for item in report["diagnostics"]
            if item["code"] == code and (path is None or item.get("path") == path)]


def label(callback: Any) -> str:
    return f"custom_module_handler:{callback.__module__}.{callback.__qualname__}"


def every_field(flops: float, *, dmas: float | None = None) -> dict[str, Any]:
    """A complete estimate of an elementwise call: all six fields."""
    return {"module_flops": flops, "macs": 0, "dmas": flops if dmas is None else dmas, "receptive_field": 1,
            "effective_stride": 1, "effective_padding": 0}


def elementwise_flops(*input_shapes: Any, out_shape: Any, **kwargs: Any) -> int:
    """Operator formula: one FLOP per output element (shape contract of PyTorch's counter)."""
    return prod(out_shape)


def thousandfold_flops(*input_shapes: Any, out_shape: Any, **kwargs: Any) -> int:
    """Operator formula with a value no built-in gives: 1000 FLOPs per output element."""
    return 1000 * prod(out_shape)


COUNT_MUL = {torch.ops.aten.mul: elementwise_flops}


#: An operator that no FLOP formula and no module-view formula will ever know (defined here, so always uncounted).
OPAQUE_LIBRARY = torch.library.Library("torchscan_extending_tests", "DEF")
OPAQUE_LIBRARY.define("opaque(Tensor x) -> Tensor")
OPAQUE_LIBRARY.impl("opaque", lambda x: x.clone(), "CompositeExplicitAutograd")
opaque = torch.ops.torchscan_extending_tests.opaque
OPAQUE_NAME = "torchscan_extending_tests.opaque"


class Recorder:
    """A callback that records each ModuleCall it receives and returns a fixed estimate."""

    def __init__(self, estimate: Any = None) -> None:
        self.calls: list[ModuleCall] = []
        self.estimate = estimate if estimate is not None else {}
        self.__qualname__ = "Recorder"

    def __call__(self, call: ModuleCall) -> Any:
        self.calls.append(call)
        return self.estimate(call) if callable(self.estimate) else dict(self.estimate)


# -- fixture modules ------------------------------------------------------------------------------------------------

class Double(nn.Module):
    """An elementwise leaf without a built-in formula: 1 multiply per element."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Opaque(nn.Module):
    """A leaf whose only operator has no FLOP formula."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return opaque(x)


class Scaled(Double):
    pass


class ScaledTwice(Scaled):
    pass


class DoublePair(nn.Module):
    """A composite that does no work itself: two Double children in sequence."""

    def __init__(self, first: nn.Module | None = None) -> None:
        super().__init__()
        self.first = first if first is not None else Double()
        self.second = Double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


class ReluPair(nn.Module):
    """Two built-in ReLU children and no direct work."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.ReLU()
        self.b = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class AtomicBlock(nn.Module):
    """Stands for a built-in atomic block (one with an inclusive complete-call formula): ReLU, Tanh, ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.before = nn.ReLU()
        self.middle = nn.Tanh()
        self.after = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.after(self.middle(self.before(x)))


#: The test built-in for AtomicBlock: inclusive FLOPs and MACs, module-local everything else.
BLOCK_ESTIMATE = {"module_flops": 100, "macs": 10, "dmas": 7, "receptive_field": 1, "effective_stride": 1,
                  "effective_padding": 0}


@pytest.fixture
def atomic_block_builtin(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Register a built-in inclusive handler for AtomicBlock (FLOPs and MACs owned) for one test."""
    callback = Recorder(BLOCK_ESTIMATE)
    handler = ModuleHandler(callback, frozenset({"module_flops", "macs"}), method="formula:test_block")
    monkeypatch.setitem(DEFAULT_HANDLERS, AtomicBlock, handler)
    return callback


def relu_builtin(report_x: torch.Tensor) -> dict[str, Any]:
    """The built-in ReLU estimates for one input, read from an analysis without registrations."""
    return analyze(nn.ReLU(), report_x)["layers"][0]["metrics"]


X = torch.arange(-3.0, 5.0)  # 8 elements


# == Registrations belong to one analysis ==========================================================================

def test_registrations_belong_to_that_analysis_only():
    # "Registrations belong to that analysis only: they do not change TorchScan's formulas."
    builtins_before = dict(DEFAULT_HANDLERS)
    custom = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"module_flops": 123})})
    plain = analyze(nn.ReLU(), X)
    assert metric(custom, "", "module_flops")["value"] == 123
    assert metric(plain, "", "module_flops")["method"] == "formula:activation"
    assert metric(plain, "", "module_flops")["value"] != 123
    assert DEFAULT_HANDLERS == builtins_before


def test_custom_mapping_is_per_analysis_and_leaves_torch_registry_alone():
    # "Use custom_mapping on the same call when you also need operator FLOP overrides." The override lives in that
    # analysis: a second analysis without it does not see it, and PyTorch's global flop_registry is unchanged.
    registry_before = dict(flop_counter.flop_registry)
    with_mapping = analyze(Double(), X, custom_mapping={torch.ops.aten.mul: thousandfold_flops})
    without = analyze(Double(), X)
    assert with_mapping["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 1, "flops": 8000}]
    assert with_mapping["operator_flops"]["custom_formulas"] == ["aten.mul"]
    assert without["operator_flops"]["custom_formulas"] == []
    assert without["totals"]["operator_flops"]["known_value"] != 8000
    assert flop_counter.flop_registry == registry_before
    assert torch.ops.aten.mul not in flop_counter.flop_registry


def test_two_views_remain_separate():
    # "The two views remain separate": a module estimate never changes the operator count, and vice versa.
    handler = ModuleHandler(lambda call: every_field(1000))
    report = analyze(Double(), X, custom_modules={Double: handler}, custom_mapping=COUNT_MUL)
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


@pytest.mark.skipif(nn.TransformerEncoder not in DEFAULT_HANDLERS, reason="built-in transformer formulas absent")
def test_end_to_end_native_encoder_with_a_custom_head():
    # "For an end-to-end example, combine a native Transformer encoder with a custom head. It shows subtree
    # ownership, nested outputs, and partial operator counts in one report."
    tokens = torch.ones(5, 1, 8)
    report = analyze(EncoderClassifier(), tokens, custom_modules={
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
    SCHEMA.validate(report)
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
    SCHEMA.validate(report)
    (call,) = callback.calls
    assert call.args == ()
    assert list(call.kwargs) == ["pair", "weights", "note"]
    assert "scale" not in call.kwargs


def test_module_call_is_frozen():
    # "The frozen ModuleCall ..." (and "The frozen call wrapper does not make the referenced objects immutable").
    callback = Recorder({"module_flops": 0})
    analyze(Double(), X, custom_modules={Double: ModuleHandler(callback)})
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

    report = analyze(Root(), torch.ones(4), torch.ones(4, dtype=torch.complex64),
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
    plain = analyze(ComplexMix(), x)
    registered = analyze(ComplexMix(), x, custom_modules={ComplexMix: ModuleHandler(lambda call: every_field(24))})
    assert registered["operator_flops"] == plain["operator_flops"]
    assert registered["totals"]["operator_flops"]["status"] == "partial"


def test_operator_override_applies_to_every_call_of_that_operator():
    # "The operator override applies to every aten.mul call in this analysis."
    report = analyze(DoublePair(), X, custom_mapping={torch.ops.aten.mul: thousandfold_flops})
    assert report["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 2, "flops": 2 * 8000}]


# == Matching ======================================================================================================

def tagged(tag: int) -> ModuleHandler:
    """A handler whose FLOPs estimate names it."""
    return ModuleHandler(lambda call: {"module_flops": tag})


def selected(model: nn.Module, custom_modules: dict) -> int:
    return metric(analyze(model, X, custom_modules=custom_modules), "", "module_flops")["value"]


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
    report = analyze(Double(), X, custom_modules={Pluggable: ModuleHandler(callback)})
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

    report = analyze(Two(), X, custom_modules={Gain: ModuleHandler(
        lambda call: {"module_flops": call.module.cost * call.output.numel()})})
    assert metric(report, "cheap", "module_flops")["value"] == 1 * 8
    assert metric(report, "dear", "module_flops")["value"] == 5 * 8


def test_caller_handler_beats_builtin_for_each_field_it_supplies():
    # "A caller handler takes precedence over a built-in formula for every field it supplies."
    builtin = relu_builtin(X)
    callback = Recorder({"module_flops": 7})
    report = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(callback)})
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
    builtin = analyze(linear, x)["layers"][0]["metrics"]
    report = analyze(linear, x, custom_modules={nn.Linear: ModuleHandler(lambda call: {"macs": 1})})
    metrics = row(report, "")["metrics"]
    assert builtin["macs"]["value"] == 2 * 3 * 4  # the built-in's own count, replaced below
    assert metrics["macs"]["value"] == 1
    assert all(metrics[name] == builtin[name] for name in FIELDS if name != "macs")


# == Numbers, None, MetricResult, omission =========================================================================

def test_each_field_carries_its_unit():
    # The field table: module_flops in FLOPs, macs in MACs, dmas in DMAs, the receptive-field fields in elements.
    report = analyze(Double(), X, custom_modules={Double: ModuleHandler(lambda call: every_field(8))})
    assert {name: result["unit"] for name, result in row(report, "")["metrics"].items()} == UNITS


def test_numeric_zero_is_a_complete_estimate():
    # "A numeric field is a complete estimate, including a legitimate zero."
    report = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"module_flops": 0})})
    assert metric(report, "", "module_flops") == {
        "status": "complete", "value": 0, "known_value": 0, "unit": "FLOPs", "scope": "module_call",
        "method": metric(report, "", "module_flops")["method"]}
    assert report["totals"]["module_flops"]["status"] == "complete"
    assert report["totals"]["module_flops"]["value"] == 0


def test_none_means_unavailable_and_never_falls_back_to_the_builtin():
    # "None explicitly means unavailable." "An explicitly supplied None or unavailable result never falls back to
    # a built-in zero or to children."
    report = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"module_flops": None})})
    result = metric(report, "", "module_flops")
    assert result["status"] == "unavailable" and result["value"] is None and result["known_value"] is None
    assert result["method"].startswith("custom_module_handler:")
    assert report["totals"]["module_flops"]["status"] == "unavailable"
    assert diagnostics(report, "incomplete_handler_estimate", "")


def test_unavailable_metric_result_never_falls_back_to_the_builtin():
    # Same sentence, with an explicit unavailable MetricResult.
    unknown = {"status": "unavailable", "value": None, "known_value": None, "unit": "MACs",
               "scope": "module_call", "method": "unknown_kernel"}
    report = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"macs": unknown})})
    assert metric(report, "", "macs")["status"] == "unavailable"
    assert report["totals"]["macs"]["status"] == "unavailable"


def test_none_on_an_owned_composite_never_falls_back_to_children():
    # "An explicitly supplied None ... never falls back ... to children."
    children = Recorder(every_field(8))
    report = analyze(DoublePair(), X, custom_modules={
        Double: ModuleHandler(children),
        DoublePair: ModuleHandler(lambda call: {"module_flops": None}, frozenset({"module_flops"}))})
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert "module_flops" not in row(report, "first")["metrics"]
    assert report["totals"]["module_flops"]["status"] == "unavailable"
    assert report["totals"]["dmas"]["value"] == 2 * 8  # the unowned fields still come from the children


def test_none_on_an_unowned_composite_leaves_the_children_counted_and_the_total_incomplete():
    # None is the composite's own call-local estimate: unavailable, children still counted as a lower bound.
    report = analyze(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(lambda call: {"module_flops": None})})
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] == 8 + 8


def test_metric_result_preserves_its_status():
    # "A MetricResult preserves complete, partial, or unavailable state."
    def results(call: ModuleCall) -> dict[str, Any]:
        return {
            "module_flops": {"status": "partial", "value": None, "known_value": 5, "unit": "FLOPs",
                             "scope": "module_call", "method": "lower_bound"},
            "macs": {"status": "complete", "value": 3, "known_value": 3, "unit": "MACs", "scope": "module_call",
                     "method": "exact"},
            "dmas": {"status": "unavailable", "value": None, "known_value": None, "unit": "DMAs",
                     "scope": "module_call", "method": "unknown"},
        }

    report = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(results)})
    metrics = row(report, "")["metrics"]
    assert (metrics["module_flops"]["status"], metrics["module_flops"]["known_value"]) == ("partial", 5)
    assert (metrics["macs"]["status"], metrics["macs"]["value"]) == ("complete", 3)
    assert metrics["dmas"]["status"] == "unavailable"
    assert report["totals"]["module_flops"] == {**report["totals"]["module_flops"], "status": "partial",
                                                "known_value": 5}


def test_omitted_field_on_a_formula_leaf_uses_the_builtin_formula():
    # "Omission is different: on a formula leaf, an omitted field uses the built-in formula."
    builtin = relu_builtin(X)
    report = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"macs": 0})})
    for name in FIELDS:
        if name != "macs":
            assert metric(report, "", name) == builtin[name]


def test_omitted_field_on_a_formula_leaf_keeps_the_builtins_unsupported_work_diagnostics():
    # "... an omitted field uses the built-in formula, including its unsupported-work diagnostics." The ReLU
    # formula declines integer tensors (module_flops unavailable); a caller that omits module_flops inherits that.
    ints = torch.arange(-4, 4)
    omitted = analyze(nn.ReLU(), ints, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"dmas": 16})})
    assert metric(omitted, "", "module_flops")["status"] == "unavailable"
    assert metric(omitted, "", "module_flops")["method"] == "formula:activation"
    # A built-in formula that declines a call says so as an unsupported configuration.
    assert [item["metric"] for item in diagnostics(omitted, "unsupported_configuration", "")] == ["module_flops"]
    supplied = analyze(nn.ReLU(), ints, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"module_flops": 8})})
    assert metric(supplied, "", "module_flops")["status"] == "complete"
    assert diagnostics(supplied, "unsupported_configuration") == []


def test_omitted_field_on_a_leaf_without_builtin_is_not_delegated():
    # "Omission ... on a formula leaf, an omitted field uses the built-in formula, including its unsupported-work
    # diagnostics"; with no built-in, the field is unsupported work (never "delegated" to non-existent children).
    report = analyze(Double(), X, custom_modules={Double: ModuleHandler(lambda call: {"module_flops": 8})})
    layer = row(report, "")
    assert "receptive_field" not in layer.get("delegated_metrics", [])
    assert layer["metrics"]["receptive_field"]["status"] == "unavailable"


def test_omitted_unowned_field_on_a_composite_delegates_to_descendants():
    # "On an ordinary registered composite, an omitted, unowned field delegates to descendants."
    report = analyze(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8, dmas=16)),
        DoublePair: ModuleHandler(lambda call: {"module_flops": 1})})
    root = row(report, "")
    assert set(root["metrics"]) == {"module_flops"}
    assert "macs" in root["delegated_metrics"] and "dmas" in root["delegated_metrics"]
    assert report["totals"]["module_flops"]["value"] == 1 + 8 + 8  # module-local: the children still add
    assert report["totals"]["dmas"]["value"] == 16 + 16
    assert report["totals"]["dmas"]["status"] == "complete"


def test_omitted_fields_use_a_complete_call_builtin_first(atomic_block_builtin):
    # "When a built-in complete-call handler exists, omitted fields use that handler's estimates and ownership
    # scope before legacy leaf fallback or child delegation."
    report = analyze(AtomicBlock(), X, custom_modules={AtomicBlock: ModuleHandler(lambda call: {"dmas": 3})})
    root = row(report, "")
    assert root["metrics"]["dmas"]["value"] == 3
    assert root["metrics"]["macs"]["value"] == 10
    assert root["metrics"]["macs"]["method"] == "formula:test_block"
    assert root["metric_ownership"]["macs"] == "subtree"
    assert "delegated_metrics" not in root or "macs" not in root["delegated_metrics"]
    for child in ("before", "middle", "after"):
        assert row(report, child)["metric_owners"]["macs"] == ROOT
        assert "macs" not in row(report, child)["metrics"]
    assert report["totals"]["macs"]["value"] == 10


def test_inclusive_builtin_fallback_covers_only_its_fields_and_module_local_caller_fields_still_add(
        atomic_block_builtin):
    # "Inclusive built-in fallbacks cover descendants only for the fields they supply; a caller's module-local
    # field still adds to those children." The caller supplies module_flops for the block's own call (3); the
    # built-in falls back for MACs, which it owns across the subtree.
    relu_flops = relu_builtin(X)["module_flops"]["value"]
    tanh = analyze(nn.Tanh(), X)["layers"][0]["metrics"]["module_flops"]["value"]
    report = analyze(AtomicBlock(), X, custom_modules={AtomicBlock: ModuleHandler(lambda call: {"module_flops": 3})})
    assert metric(report, "", "module_flops")["scope"] == "module_call"
    assert report["totals"]["module_flops"]["value"] == 3 + relu_flops + tanh + relu_flops
    assert report["totals"]["macs"]["value"] == 10
    assert "module_flops" in row(report, "middle")["metrics"]
    assert row(report, "middle")["metric_owners"] == {"macs": ROOT}


def test_parent_fields_replace_descendant_contributions_and_their_diagnostics(atomic_block_builtin):
    # "If a caller overrides some fields while other fields fall back to an inclusive built-in handler, descendant
    # estimates may run before that parent callback returns. The selected parent fields then replace those
    # contributions and their estimation diagnostics."
    tanh = Recorder({"macs": None})  # an incomplete MACs estimate: diagnosed, then replaced by the block's MACs
    report = analyze(AtomicBlock(), X, custom_modules={
        nn.Tanh: ModuleHandler(tanh),
        AtomicBlock: ModuleHandler(lambda call: {"module_flops": 3})})
    assert len(tanh.calls) == 1
    assert "macs" not in row(report, "middle")["metrics"]
    assert row(report, "middle")["metric_owners"]["macs"] == ROOT
    assert [item for item in report["diagnostics"] if item.get("metric") == "macs"] == []
    assert report["totals"]["macs"] == {**report["totals"]["macs"], "status": "complete", "value": 10}


def test_explicit_caller_ownership_suppresses_child_estimates_before_they_execute():
    # "Explicit caller subtree ownership suppresses child estimates before they execute." "... an ancestor owning
    # all fields skips a descendant callback."
    children = Recorder(every_field(8))
    report = analyze(DoublePair(), X, custom_modules={
        Double: ModuleHandler(children),
        DoublePair: ModuleHandler(lambda call: every_field(20), frozenset(FIELDS))})
    assert children.calls == []
    for child in ("first", "second"):
        assert row(report, child)["metrics"] == {}
        assert row(report, child)["metric_owners"] == {name: ROOT for name in FIELDS}
    assert report["totals"]["module_flops"]["value"] == 20


# == When callbacks run =============================================================================================

class Repeat(nn.Module):
    """Calls one child three times with growing inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = Double()

    def forward(self, *inputs):
        return [self.scale(x) for x in inputs]


def test_callback_runs_once_per_completed_call_with_a_new_context_each_time():
    # "Callbacks run at most once per successfully completed matching invocation." "A reused module receives a new
    # call context each time it is estimated."
    callback = Recorder(lambda call: every_field(call.output.numel()))
    report = analyze(Repeat(), X[:2], X[:4], X, custom_modules={Double: ModuleHandler(callback)})
    assert len(callback.calls) == 3
    assert len({id(call) for call in callback.calls}) == 3
    assert [call.args[0].shape[0] for call in callback.calls] == [2, 4, 8]
    assert [metric(report, "scale", "module_flops", index)["value"] for index in range(3)] == [2, 4, 8]
    assert report["totals"]["module_flops"]["value"] == 2 + 4 + 8


class Fragile(nn.Module):
    def forward(self, x):
        raise ValueError("refused")


class NothingBack(nn.Module):
    def forward(self, x):
        return None


class Tolerant(nn.Module):
    """Catches its first child's failure and carries on with two more children."""

    def __init__(self) -> None:
        super().__init__()
        self.fragile = Fragile()
        self.nothing = NothingBack()
        self.relu = nn.ReLU()

    def forward(self, x):
        try:
            self.fragile(x)
        except ValueError:
            pass
        self.nothing(x)
        return self.relu(x)


def test_failed_forward_does_not_invoke_its_callback_and_is_reported():
    # "A failed forward does not invoke its callback. If the enclosing model catches that failure and continues,
    # its row records output kind failed, unavailable estimates, and a module_forward_error diagnostic. Later
    # sibling calls are counted independently. A successfully returned None remains a complete callback output."
    fragile, nothing = Recorder(every_field(0)), Recorder(every_field(0))
    report = analyze(Tolerant(), X, custom_modules={Fragile: ModuleHandler(fragile),
                                                    NothingBack: ModuleHandler(nothing)})
    assert fragile.calls == []
    failed = row(report, "fragile")
    assert failed["output"] == {"kind": "failed"}
    assert {name: result["status"] for name, result in failed["metrics"].items()} == dict.fromkeys(
        FIELDS, "unavailable")
    assert [item["path"] for item in diagnostics(report, "module_forward_error")] == ["fragile"]
    (returned_none,) = nothing.calls
    assert returned_none.output is None
    assert row(report, "nothing")["output"] == {"kind": "none"}
    assert all(result["status"] == "complete" for result in row(report, "nothing")["metrics"].values())
    assert row(report, "relu")["metrics"] == relu_builtin(X)
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] == relu_builtin(X)["module_flops"]["value"]


def test_failed_forward_fails_strict_analysis():
    # The failed call's unavailable estimates are incomplete requested analysis.
    report = strict_failure(Tolerant(), X, custom_modules={Fragile: ModuleHandler(lambda call: every_field(0)),
                                                           NothingBack: ModuleHandler(lambda call: every_field(0))})
    assert diagnostics(report, "module_forward_error", "fragile")


def test_partially_covered_callback_gets_the_full_context_but_its_covered_fields_are_ignored():
    # "A partially covered callback receives the full context, but its covered fields are ignored."
    children = Recorder(lambda call: every_field(999))
    report = analyze(DoublePair(), X, custom_modules={
        Double: ModuleHandler(children),
        DoublePair: ModuleHandler(lambda call: {"module_flops": 16}, frozenset({"module_flops"}))})
    assert len(children.calls) == 2
    first = children.calls[0]
    assert first.args[0] is X and torch.equal(first.output, X * 2)
    assert "module_flops" not in row(report, "first")["metrics"]
    assert metric(report, "first", "dmas")["value"] == 999
    assert report["totals"]["module_flops"]["value"] == 16


# == Subtree ownership =============================================================================================

def test_supplied_estimates_cover_only_the_registered_call_by_default():
    # "By default, each supplied estimate covers only the registered module's own call. Children are still counted."
    report = analyze(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(lambda call: every_field(5))})
    assert row(report, "")["metric_ownership"] == dict.fromkeys(FIELDS, "module_call")
    assert "metric_owners" not in row(report, "first")
    assert report["totals"]["module_flops"]["value"] == 5 + 8 + 8


def test_ownership_is_independent_per_metric_including_receptive_fields():
    # "Ownership is independent for each metric, including receptive-field fields."
    report = analyze(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(lambda call: {"receptive_field": 1}, frozenset({"receptive_field"}))})
    root, first = row(report, ""), row(report, "first")
    assert root["metric_ownership"] == {"receptive_field": "subtree"}
    assert metric(report, "", "receptive_field")["scope"] == "subtree"
    assert first["metric_owners"] == {"receptive_field": ROOT}
    assert set(first["metrics"]) == set(FIELDS) - {"receptive_field"}
    assert report["totals"]["module_flops"]["value"] == 16


class WithParameters(nn.Module):
    """A composite whose two children hold parameters: a Linear and a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.linear(x))


def test_covered_rows_keep_structure_inputs_outputs_and_parameters():
    # "Descendant layer rows, their inputs/outputs, and parameter statistics remain in the report. Covered metric
    # fields are omitted from those rows; metric_owners identifies the owning ancestor's path and call_index. The
    # owning row records metric_ownership as "subtree"; ordinary supplied estimates use "module_call"."
    plain = analyze(WithParameters(), torch.ones(2, 4))
    owned = analyze(WithParameters(), torch.ones(2, 4), custom_modules={WithParameters: ModuleHandler(
        lambda call: {"module_flops": 50, "macs": 24}, frozenset({"module_flops"}))})
    for path in ("linear", "relu"):
        before, after = row(plain, path), row(owned, path)
        for key in ("type", "depth", "input", "output", "parameters", "buffers", "parent"):
            assert after[key] == before[key]
        assert "module_flops" not in after["metrics"]
        assert after["metrics"]["macs"] == before["metrics"]["macs"]
        assert after["metric_owners"] == {"module_flops": ROOT}
    assert row(owned, "linear")["parameters"]["count"] == 4 * 3 + 3
    assert row(owned, "")["metric_ownership"] == {"module_flops": "subtree", "macs": "module_call"}
    assert owned["totals"]["module_flops"]["value"] == 50
    assert owned["totals"]["macs"]["value"] == 24 + 2 * 3 * 4  # the parent's own MACs plus the Linear's


class SharedChild(nn.Module):
    """One Double instance used inside ``pair`` and again directly by the root."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = Double()
        self.pair = DoublePair(first=self.shared)

    def forward(self, x):
        return self.shared(self.pair(x))


def test_ownership_follows_executed_calls_and_a_shared_child_called_elsewhere_counts_independently():
    # "Ownership follows executed calls: it covers descendants invoked during that parent invocation. If a shared
    # child is called elsewhere, that other call remains independently counted."
    callback = Recorder(lambda call: every_field(8))
    report = analyze(SharedChild(), X, custom_modules={
        Double: ModuleHandler(callback),
        DoublePair: ModuleHandler(lambda call: {"module_flops": 16}, frozenset({"module_flops"}))})
    assert len(callback.calls) == 3
    assert row(report, "shared", 0)["metric_owners"] == {"module_flops": {"path": "pair", "call_index": 0}}
    assert "metric_owners" not in row(report, "shared", 1)
    assert metric(report, "shared", "module_flops", 1)["value"] == 8
    assert report["totals"]["module_flops"]["value"] == 16 + 8


def test_sum_retained_estimates_once_without_invented_zeros():
    # "Sum the retained estimates once, without inventing zeros for covered fields."
    report = analyze(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(lambda call: {"dmas": 40}, frozenset({"dmas"}))})
    retained = [layer["metrics"]["dmas"] for layer in report["layers"] if "dmas" in layer["metrics"]]
    assert retained == [metric(report, "", "dmas")]
    assert report["totals"]["dmas"]["value"] == 40
    assert report["totals"]["module_flops"]["value"] == 8 + 8


def test_shared_parameters_are_counted_once_in_model_totals():
    # "Model parameter totals still count shared parameters only once."
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.one = nn.Linear(4, 4)
            self.two = nn.Linear(4, 4)
            self.two.weight = self.one.weight

        def forward(self, x):
            return self.two(self.one(x))

    report = analyze(Tied(), torch.ones(1, 4), custom_modules={
        Tied: ModuleHandler(lambda call: {"macs": 32}, frozenset({"macs"}))})
    assert report["totals"]["parameters"]["total"] == 4 * 4 + 4 + 4
    assert sum(layer["parameters"]["count"] for layer in report["layers"]) == 4 * 4 + 4 + 4


@pytest.mark.parametrize("outcome", ["omitted", "none", "unavailable", "raises"])
def test_failed_inclusive_formula_keeps_children_covered_and_the_result_incomplete(outcome):
    # "If the parent omits an owned field, returns an unavailable value, or its callback fails, the children remain
    # covered and the owned result is incomplete. TorchScan does not silently substitute child estimates for a
    # failed inclusive formula."
    def parent(call: ModuleCall) -> dict[str, Any]:
        if outcome == "raises":
            raise RuntimeError("formula bug")
        unavailable = {"status": "unavailable", "value": None, "known_value": None, "unit": "FLOPs",
                       "scope": "subtree", "method": "unknown"}
        value = {"omitted": None, "none": None, "unavailable": unavailable}[outcome]
        return {"macs": 0} if outcome == "omitted" else {"module_flops": value, "macs": 0}

    report = analyze(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(parent, frozenset({"module_flops"}))})
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert metric(report, "", "module_flops")["scope"] == "subtree"
    for child in ("first", "second"):
        assert "module_flops" not in row(report, child)["metrics"]
        assert row(report, child)["metric_owners"]["module_flops"] == ROOT
    assert report["totals"]["module_flops"]["status"] == "unavailable"
    expected = "handler_exception" if outcome == "raises" else "incomplete_handler_estimate"
    assert diagnostics(report, expected, "")


def test_operator_flops_cannot_supply_missing_module_estimates_of_direct_work():
    # "Delegation only describes descendant estimates. Functional work performed directly by the composite needs
    # its own estimate for each affected metric; operator FLOPs may observe that work separately, but cannot supply
    # missing MACs, DMAs, or receptive-field estimates."
    class DirectWork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = Double()

        def forward(self, x):
            return opaque(self.scale(x))

    report = analyze(DirectWork(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DirectWork: ModuleHandler(lambda call: {"module_flops": 8})},
        custom_mapping={**COUNT_MUL, opaque: elementwise_flops})
    assert report["totals"]["operator_flops"]["status"] == "complete"
    assert report["totals"]["module_flops"] == {**report["totals"]["module_flops"], "status": "complete",
                                                "value": 8 + 8}
    for name in ("macs", "dmas"):
        assert report["totals"][name]["status"] == "partial"
        assert any(item["metric"] == name for item in diagnostics(report, "unestimated_direct_work", ""))


# == Validation ======================================================================================================

def complete_result(unit: str = "FLOPs", **changes: Any) -> dict[str, Any]:
    return {"status": "complete", "value": 4, "known_value": 4, "unit": unit, "scope": "module_call",
            "method": "mine", **changes}


INVALID_ESTIMATES = {
    "extra key": complete_result(note="x"),
    "missing key": {key: value for key, value in complete_result().items() if key != "scope"},
    "empty scope": complete_result(scope=""),
    "empty method": complete_result(method=""),
    "non-string method": complete_result(method=3),
    "nan": math.nan,
    "infinity": math.inf,
    "negative": -1,
    "boolean": True,
    "string": "4",
    "tensor": torch.tensor(4.0),
    "list for a count": [4, 4],
    "boolean inside": complete_result(value=True, known_value=True),
    "negative inside": complete_result(value=-4, known_value=-4),
    "infinite lower bound": complete_result(status="partial", value=None, known_value=math.inf),
    "complete unequal": complete_result(value=4, known_value=3),
    "complete without numbers": complete_result(value=None, known_value=None),
    "partial with value": complete_result(status="partial"),
    "partial without known_value": complete_result(status="partial", value=None, known_value=None),
    "unavailable with known_value": complete_result(status="unavailable", value=None),
    "unknown status": complete_result(status="exact"),
    "wrong unit": complete_result(unit="MACs"),
}


@pytest.mark.parametrize("name", sorted(INVALID_ESTIMATES))
def test_invalid_field_is_diagnosed_and_unavailable_while_other_fields_stay(name):
    # "A structured estimate must contain exactly the six MetricResult fields, with nonempty scope and method
    # strings. Counts and lower bounds must be finite, nonnegative real numbers; booleans are invalid. A complete
    # MetricResult requires equal numeric value and known_value. A partial result requires value=None and numeric
    # known_value; an unavailable result requires both numeric fields to be None. The unit must match the field.
    # Invalid fields receive diagnostics and unavailable results instead of unexplained zeros. ... Other valid
    # fields can remain complete when one estimate is invalid."
    callback = Recorder({"module_flops": INVALID_ESTIMATES[name], "macs": 0})
    report = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(callback)})
    flops = metric(report, "", "module_flops")
    assert flops == {"status": "unavailable", "value": None, "known_value": None, "unit": "FLOPs",
                     "scope": "module_call", "method": label(callback)}
    assert metric(report, "", "macs")["status"] == "complete"
    assert [item["metric"] for item in diagnostics(report, "invalid_handler_result", "")] == ["module_flops"]
    assert report["totals"]["module_flops"]["status"] == "unavailable"


@pytest.mark.parametrize("result", [[("macs", 1)], None, 12, "macs", {"flops": 1, "macs": 2}, {"macs": 1, 3: 4}],
                         ids=["list", "none", "number", "string", "unknown name", "non-string name"])
def test_non_mapping_or_unsupported_name_invalidates_the_whole_result(result):
    # "Results must be mappings with supported field names; a non-mapping result or unsupported name invalidates the
    # whole callback result."
    callback = Recorder(lambda call: result)
    report = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(callback)})
    metrics = row(report, "")["metrics"]
    assert {name: (item["status"], item["method"]) for name, item in metrics.items()} == {
        name: ("unavailable", label(callback)) for name in FIELDS}
    (problem,) = diagnostics(report, "invalid_handler_result", "")
    assert problem["metric"] is None


def test_receptive_fields_accept_per_dimension_lists():
    # Receptive-field fields may be one number or one number per spatial dimension; an empty list is not a count.
    report = analyze(Double(), X, custom_modules={Double: ModuleHandler(lambda call: {
        "receptive_field": [3, 5], "effective_stride": [1, 2], "effective_padding": []})})
    assert metric(report, "", "receptive_field")["value"] == [3, 5]
    assert metric(report, "", "effective_stride")["known_value"] == [1, 2]
    assert metric(report, "", "effective_padding")["status"] == "unavailable"
    assert [item["metric"] for item in diagnostics(report, "invalid_handler_result")] == ["effective_padding"]


def test_callbacks_cannot_claim_a_metric_was_not_requested():
    # "A MetricResult preserves complete, partial, or unavailable state": "not_requested" belongs to structure mode
    # and is no estimate; in a full analysis it must be rejected like any other invalid field.
    hidden = {"status": "not_requested", "value": None, "known_value": None, "unit": "FLOPs",
              "scope": "module_call", "method": "skip"}
    report = analyze(Double(), X, custom_modules={Double: ModuleHandler(
        lambda call: {**every_field(8), "module_flops": hidden})}, custom_mapping=COUNT_MUL)
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert diagnostics(report, "invalid_handler_result", "")
    assert report["totals"]["module_flops"]["status"] == "unavailable"


def test_method_label_names_the_callback_and_appends_the_result_method():
    # "TorchScan ... labels the method custom_module_handler:<callback module>.<callback qualname>, appending your
    # result's method when supplied."
    def local_formula(call: ModuleCall) -> dict[str, Any]:
        return {"module_flops": 8, "macs": complete_result(unit="MACs", method="my_convention")}

    report = analyze(Double(), X, custom_modules={Double: ModuleHandler(local_formula)})
    expected = f"custom_module_handler:{__name__}.test_method_label_names_the_callback_and_appends_the_result_method" \
               ".<locals>.local_formula"
    assert label(local_formula) == expected
    assert metric(report, "", "module_flops")["method"] == expected
    assert metric(report, "", "macs")["method"] == expected + ":my_convention"
    assert report["context"]["custom_modules"] == [
        {"type": f"{__name__}.Double", "method": expected, "subtree_metrics": []}]


def test_caller_handlers_are_always_labelled_as_custom():
    # "TorchScan ... labels the method custom_module_handler:<callback module>.<callback qualname>, appending your
    # result's method when supplied." A registration in custom_modules is a caller's, whatever it calls itself.
    def impostor(call: ModuleCall) -> dict[str, Any]:
        return {"module_flops": 8, "macs": complete_result(unit="MACs", value=0, known_value=0, method="mine")}

    report = analyze(Double(), X, custom_modules={Double: ModuleHandler(impostor, method="formula:linear")})
    assert metric(report, "", "module_flops")["method"] == label(impostor)
    assert metric(report, "", "macs")["method"] == label(impostor) + ":mine"


@pytest.mark.parametrize("owned", [False, True])
def test_scope_is_normalized_to_the_declared_ownership(owned):
    # "The normalized scope is module_call or subtree, as declared by the handler."
    handler = ModuleHandler(lambda call: {"module_flops": complete_result(scope="whatever I like")},
                            frozenset({"module_flops"}) if owned else frozenset())
    report = analyze(DoublePair(), X, custom_modules={DoublePair: handler})
    assert metric(report, "", "module_flops")["scope"] == ("subtree" if owned else "module_call")


def test_callback_exceptions_become_diagnostics_and_incomplete_estimates():
    # "Callback exceptions also produce diagnostics and incomplete estimates."
    def broken(call: ModuleCall) -> dict[str, Any]:
        raise KeyError("missing")

    report = analyze(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(broken)})
    assert all(result["status"] == "unavailable" for result in row(report, "")["metrics"].values())
    (problem,) = diagnostics(report, "handler_exception", "")
    assert "KeyError" in problem["message"]
    assert report["totals"]["module_flops"]["status"] == "unavailable"


# == strict mode =====================================================================================================

def test_strict_raises_for_handler_failures_and_the_report_keeps_the_evidence():
    # "strict=True raises IncompleteAnalysisError for incomplete requested analysis, including handler failures ...
    # The exception's report retains the evidence."
    def broken(call: ModuleCall) -> dict[str, Any]:
        raise ZeroDivisionError

    report = strict_failure(Double(), X, custom_modules={Double: ModuleHandler(broken)}, custom_mapping=COUNT_MUL)
    assert diagnostics(report, "handler_exception", "")
    assert report["totals"]["module_flops"]["status"] == "unavailable"


def test_strict_raises_for_uncounted_operators_even_with_complete_module_estimates():
    # "... and uncounted operator work." "Supplying module estimates alone does not guarantee strict success:
    # inspect the separate operator report too."
    handlers = {Opaque: ModuleHandler(lambda call: every_field(8))}
    report = strict_failure(Opaque(), X, custom_modules=handlers)
    assert all(report["totals"][name]["status"] == "complete" for name in ("module_flops", "macs", "dmas"))
    assert report["totals"]["operator_flops"]["status"] == "partial"
    assert [item["operator"] for item in report["operator_flops"]["uncounted"]] == [OPAQUE_NAME]
    assert [item["operator"] for item in diagnostics(report, "uncounted_operator")] == [OPAQUE_NAME]
    counted = crawl_module(Opaque(), args=(X,), custom_modules=handlers, strict=True,
                           custom_mapping={opaque: elementwise_flops})
    assert counted["totals"]["operator_flops"]["value"] == 8


# == Callback scope ==================================================================================================

def test_callbacks_run_in_the_post_hook_under_no_grad_without_operator_counting():
    # "Callbacks execute immediately in the module's post-hook, under torch.no_grad() with operator counting
    # suspended. Tensor operations used for estimation are excluded from measured workload FLOPs."
    seen = []

    def heavy(call: ModuleCall) -> dict[str, Any]:
        seen.append(torch.is_grad_enabled())
        product = torch.mm(torch.ones(16, 16), torch.ones(16, 16))  # 2 * 16^3 FLOPs if it were counted
        return {"module_flops": int(product[0, 0])}

    report = analyze(Double(), X, custom_modules={Double: ModuleHandler(heavy)}, custom_mapping=COUNT_MUL)
    assert seen == [False]
    assert metric(report, "", "module_flops")["value"] == 16
    assert report["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 1, "flops": 8}]
    assert report["totals"]["operator_flops"]["value"] == 8


def test_callbacks_run_immediately_after_their_call():
    # "Callbacks execute immediately in the module's post-hook": the first child's estimate exists before the
    # parent's forward moves on to the second child.
    events = []

    class Narrated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = Double(), Double()

        def forward(self, x):
            x = self.first(x)
            events.append("parent continues")
            return self.second(x)

    def estimate(call: ModuleCall) -> dict[str, Any]:
        events.append(f"estimate {call.module is model.first and 'first' or 'second'}")
        return every_field(8)

    model = Narrated()
    analyze(model, X, custom_modules={Double: ModuleHandler(estimate)})
    assert events == ["estimate first", "parent continues", "estimate second"]


def test_the_model_still_executes_once():
    # "The model still executes once."
    class Counted(Double):
        runs = 0

        def forward(self, x):
            Counted.runs += 1
            return x * 2

    analyze(Counted(), X, custom_modules={Counted: ModuleHandler(lambda call: every_field(8))})
    assert Counted.runs == 1


def test_temporary_call_references_are_released():
    # "The report retains metadata, not tensor values. TorchScan releases temporary call references after
    # estimation." The call and its output die once crawl_module returns, although the report is still alive.
    references = []

    def observe(call: ModuleCall) -> dict[str, Any]:
        references.extend((weakref.ref(call), weakref.ref(call.output)))
        return every_field(8)

    report = analyze(DoublePair(), X, custom_modules={Double: ModuleHandler(observe)})
    assert len(references) == 4
    assert all(reference() is None for reference in references)
    assert report["layers"][1]["output"]["kind"] == "tensor"


def test_activations_retained_by_the_callback_are_the_callers_responsibility():
    # "... retaining an activation in your callback's own state can retain its storage and is your responsibility."
    kept = []
    analyze(Double(), X, custom_modules={Double: ModuleHandler(lambda call: kept.append(call.output) or {})})
    assert torch.equal(kept[0], X * 2)


def test_hooks_are_removed_and_training_flags_restored_even_after_errors():
    # "TorchScan removes its hooks and restores every original training flag after analysis, including after
    # errors."
    class Explodes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Double()

        def forward(self, x):
            self.inner(x)
            raise RuntimeError("model failure")

    model = Explodes()
    model.train()
    model.inner.eval()
    with pytest.raises(RuntimeError, match="model failure"):
        crawl_module(model, args=(X,), custom_modules={Double: ModuleHandler(lambda call: every_field(8))})
    assert (model.training, model.inner.training) == (True, False)
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks


def test_structure_mode_runs_neither_handlers_nor_custom_operator_formulas():
    # "mode="structure" runs the forward pass for structural reporting but executes neither module handlers nor
    # custom operator formulas. Compute metrics remain explicitly unrequested."
    runs = {"handler": 0, "formula": 0}

    def handler(call: ModuleCall) -> dict[str, Any]:
        runs["handler"] += 1
        return every_field(8)

    def formula(*shapes: Any, out_shape: Any, **kwargs: Any) -> int:
        runs["formula"] += 1
        return 8

    report = analyze(DoublePair(), X, custom_modules={Double: ModuleHandler(handler)},
                     custom_mapping={torch.ops.aten.mul: formula}, mode="structure")
    assert runs == {"handler": 0, "formula": 0}
    assert [layer["path"] for layer in report["layers"]] == ["", "first", "second"]
    for layer in report["layers"]:
        assert {result["status"] for result in layer["metrics"].values()} == {"not_requested"}
    for name in ("module_flops", "macs", "dmas", "operator_flops"):
        assert report["totals"][name]["status"] == "not_requested"
    assert report["context"]["analysis_mode"] == "structure"


def test_raw_and_shape_operator_callbacks_follow_the_installed_counter_contract():
    # "Operator callbacks follow the installed PyTorch counter's contract." Shape callbacks get shapes and
    # out_shape; on this PyTorch, a callback marked _get_raw receives the raw tensors and out_val.
    received = {}

    def shapes(*args: Any, out_shape: Any, **kwargs: Any) -> int:
        received["shape"] = (args[0], out_shape)
        return 1

    def raw(*args: Any, out_val: Any, **kwargs: Any) -> int:
        received["raw"] = (type(args[0]), type(out_val))
        return 2

    raw._get_raw = True  # type: ignore[attr-defined]
    analyze(Double(), X, custom_mapping={torch.ops.aten.mul: shapes})
    report = analyze(Double(), X, custom_mapping={torch.ops.aten.mul: raw})
    assert tuple(received["shape"][0]) == (8,) and tuple(received["shape"][1]) == (8,)
    assert received["raw"] == (torch.Tensor, torch.Tensor)
    assert report["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 1, "flops": 2}]


def test_handlers_run_only_for_observed_module_calls():
    # "Handlers run only for observed module calls. Functional operations and fused kernels may use child
    # parameters without invoking a child's forward; a child handler cannot intercept that work."
    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(4, 2)

        def forward(self, x):
            return nn.functional.linear(x, self.proj.weight, self.proj.bias)

    callback = Recorder({"macs": 1})
    report = analyze(Functional(), torch.ones(1, 4), custom_modules={nn.Linear: ModuleHandler(callback)})
    assert callback.calls == []
    assert [layer["path"] for layer in report["layers"]] == [""]
    assert report["totals"]["parameters"]["total"] == 4 * 2 + 2


@pytest.mark.skipif(nn.TransformerEncoderLayer not in DEFAULT_HANDLERS, reason="built-in transformer formulas absent")
def test_native_transformer_handlers_own_their_subtree_while_child_rows_remain():
    # "Native attention and Transformer handlers own their documented estimates across their subtree, while
    # observed child calls remain in the structure."
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)  # batch_first=False: the children are called
    report = analyze(layer, torch.ones(3, 1, 8))
    assert row(report, "")["metric_ownership"] == dict.fromkeys(FIELDS, "subtree")
    assert {"self_attn", "norm1", "linear1", "linear2", "norm2"} <= {item["path"] for item in report["layers"]}
    for path in ("self_attn", "norm1", "linear1", "linear2", "norm2"):
        assert row(report, path)["metrics"] == {}
        assert row(report, path)["metric_owners"] == dict.fromkeys(FIELDS, ROOT)


# == Expanded atomic boundaries ======================================================================================

def test_registered_descendant_opens_a_builtin_atomic_root(atomic_block_builtin):
    # "An observed descendant with a matching registration opens an otherwise atomic legacy root when the root has
    # no registered enclosing handler. The inclusive root formula is excluded to prevent double counting. Missing
    # root work produces expanded_atomic_boundary diagnostics and partial totals with descendant counts as lower
    # bounds."
    report = analyze(AtomicBlock(), X, custom_modules={nn.Tanh: ModuleHandler(lambda call: {"module_flops": 5})})
    assert [item["path"] for item in diagnostics(report, "expanded_atomic_boundary")] == [""]
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert metric(report, "middle", "module_flops")["value"] == 5
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] >= 5
    assert report["totals"]["module_flops"]["known_value"] != BLOCK_ESTIMATE["module_flops"]


def test_opened_root_counts_every_observed_descendant(atomic_block_builtin):
    # "... partial totals with descendant counts as lower bounds": once opened, every observed descendant counts,
    # whether it ran before or after the registered one.
    relu_flops = relu_builtin(X)["module_flops"]["value"]
    report = analyze(AtomicBlock(), X, custom_modules={nn.Tanh: ModuleHandler(lambda call: {"module_flops": 5})})
    assert "module_flops" in row(report, "before")["metrics"]
    assert "module_flops" in row(report, "after")["metrics"]
    assert report["totals"]["module_flops"]["known_value"] == relu_flops + 5 + relu_flops


def test_registering_the_root_too_supplies_its_estimates(atomic_block_builtin):
    # "Register the root too to supply its own or inclusive estimates."
    report = analyze(AtomicBlock(), X, custom_modules={
        nn.Tanh: ModuleHandler(lambda call: {"module_flops": 5}),
        AtomicBlock: ModuleHandler(lambda call: {"module_flops": 60}, frozenset({"module_flops"}))})
    assert diagnostics(report, "expanded_atomic_boundary") == []
    assert report["totals"]["module_flops"] == {**report["totals"]["module_flops"], "status": "complete",
                                                "value": 60}
    assert report["totals"]["macs"]["value"] == BLOCK_ESTIMATE["macs"]  # the built-in still owns MACs


def test_without_a_matching_caller_registration_the_atomic_boundary_remains(atomic_block_builtin):
    # "Without a matching caller registration, the original atomic boundary remains."
    report = analyze(AtomicBlock(), X, custom_modules={nn.GELU: ModuleHandler(lambda call: {"module_flops": 5})})
    assert diagnostics(report, "expanded_atomic_boundary") == []
    assert report["totals"]["module_flops"]["value"] == BLOCK_ESTIMATE["module_flops"]
    assert report["totals"]["macs"]["value"] == BLOCK_ESTIMATE["macs"]
    assert row(report, "middle")["metric_owners"] == {"module_flops": ROOT, "macs": ROOT}


@pytest.mark.skipif(nn.TransformerEncoderLayer not in DEFAULT_HANDLERS, reason="built-in transformer formulas absent")
def test_registered_linear_opens_a_native_transformer_layer():
    # The same sentence on a native module: registering nn.Linear (linear1/linear2 are called on the slow path)
    # opens TransformerEncoderLayer; registering the layer too restores its estimates.
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    x = torch.ones(3, 1, 8)
    linear = ModuleHandler(lambda call: {"module_flops": 1, "macs": 1})
    opened = analyze(layer, x, custom_modules={nn.Linear: linear})
    assert [item["path"] for item in diagnostics(opened, "expanded_atomic_boundary")] == [""]
    assert opened["totals"]["module_flops"]["status"] == "partial"
    assert opened["totals"]["module_flops"]["known_value"] >= 2
    closed = analyze(layer, x, custom_modules={nn.Linear: linear, nn.TransformerEncoderLayer: ModuleHandler(
        lambda call: {"module_flops": 1000}, frozenset({"module_flops"}))})
    assert diagnostics(closed, "expanded_atomic_boundary") == []
    assert closed["totals"]["module_flops"]["value"] == 1000


@pytest.mark.skipif(nn.MultiheadAttention not in DEFAULT_HANDLERS, reason="built-in attention formulas absent")
def test_unobserved_out_proj_registration_leaves_multihead_attention_atomic():
    # "Handlers run only for observed module calls" / "Without a matching caller registration, the original atomic
    # boundary remains." MultiheadAttention reads out_proj's parameters functionally and never calls out_proj, so a
    # handler for its type (NonDynamicallyQuantizableLinear) is never observed and cannot open the built-in.
    attention = nn.MultiheadAttention(8, 2)
    x = torch.ones(3, 1, 8)
    callback = Recorder({"macs": 1})
    plain = analyze(attention, x, x, x)
    report = analyze(attention, x, x, x, custom_modules={type(attention.out_proj): ModuleHandler(callback)})
    assert callback.calls == []
    assert [layer["path"] for layer in report["layers"]] == [""]
    assert diagnostics(report, "expanded_atomic_boundary") == []
    assert report["totals"]["macs"] == plain["totals"]["macs"]
    # "Atomic implementations can use child parameters without invoking their modules. Parameter totals stay
    # unique": out_proj has no row, yet its parameters are in the model totals.
    assert report["totals"]["parameters"]["total"] == 3 * 8 * 8 + 3 * 8 + 8 * 8 + 8


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
    assert analyze(Product(), square)["operator_flops"]["by_operator"] == [
        {"operator": "aten.mm", "calls": 1, "flops": 2 * 3 * 3 * 3}]
    overridden = analyze(Product(), square, custom_mapping={torch.ops.aten.mm: lambda *a, out_shape, **k: 7})
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
