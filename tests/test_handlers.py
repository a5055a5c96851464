"""Module handlers: construction checks, closest-class selection in the MRO, and validation of callback results."""

from __future__ import annotations

import abc

import pytest
import torch
from torch import nn
from torchscan_testing import analyze

from torchscan import ModuleCall, ModuleHandler, crawl_module
from torchscan.estimation import CallContext
from torchscan.handlers import METRIC_FIELDS, closest_handler, validate_estimates, validate_handler_map
from torchscan.results import NOT_APPLICABLE, Incomplete
from torchscan.schema import validate_report


def constant(**fields):
    """A callback returning fixed estimates (its qualname is stable, so labels are predictable)."""
    def callback(call: ModuleCall):
        return dict(fields)
    return callback


def estimate_nothing(call: ModuleCall):
    return {}


SIX = {"module_flops": 8, "macs": 4, "dmas": 12, "receptive_field": 1, "effective_stride": 1,
       "effective_padding": 0}


# -- construction ---------------------------------------------------------------------------------------------------

def test_handler_needs_a_callable():
    with pytest.raises(TypeError, match="callable"):
        ModuleHandler(42)


def test_subtree_metrics_must_be_a_set_of_names_not_a_string():
    with pytest.raises(TypeError, match="subtree_metrics"):
        ModuleHandler(estimate_nothing, "macs")
    with pytest.raises(TypeError, match="subtree_metrics"):
        ModuleHandler(estimate_nothing, ["macs"])


def test_subtree_metrics_reject_unknown_metric_names():
    with pytest.raises(ValueError, match="flops"):
        ModuleHandler(estimate_nothing, frozenset({"flops"}))


def test_subtree_metrics_become_a_frozenset_and_decide_the_scope():
    handler = ModuleHandler(estimate_nothing, {"macs", "dmas"})
    assert handler.subtree_metrics == frozenset({"macs", "dmas"})
    assert isinstance(handler.subtree_metrics, frozenset)
    assert handler.scope("macs") == "subtree" and handler.scope("module_flops") == "module_call"


def test_caller_label_names_the_callback_module_and_qualname():
    assert ModuleHandler(estimate_nothing).label == f"custom_module_handler:{__name__}.estimate_nothing"
    assert ModuleHandler(estimate_nothing, method="formula:linear").label == "formula:linear"


def test_handler_map_validation_names_the_argument():
    with pytest.raises(TypeError, match="custom_modules"):
        validate_handler_map([nn.Linear])
    with pytest.raises(TypeError, match="custom_modules keys"):
        validate_handler_map({int: ModuleHandler(estimate_nothing)})
    with pytest.raises(TypeError, match=r"custom_modules\[Linear\]"):
        validate_handler_map({nn.Linear: estimate_nothing})
    assert validate_handler_map(None) == {}


# -- closest class in the MRO -----------------------------------------------------------------------------------------

class Base(nn.Module):
    def forward(self, x):
        return x


class Child(Base):
    pass


class GrandChild(Child):
    pass


class Mixin(nn.Module):
    pass


class Both(Mixin, Child):
    pass


class Marker(abc.ABC):  # noqa: B024 -- an abstract base that classes are registered with, none inherit
    pass


Marker.register(GrandChild)


def test_exact_class_wins_over_a_registered_base():
    base, child = ModuleHandler(constant(macs=1)), ModuleHandler(constant(macs=2))
    for mapping in ({Base: base, Child: child}, {Child: child, Base: base}):
        assert closest_handler(Child, mapping) is child


def test_nearest_registered_base_is_selected_regardless_of_mapping_order():
    base, child = ModuleHandler(constant(macs=1)), ModuleHandler(constant(macs=2))
    for mapping in ({Base: base, Child: child}, {Child: child, Base: base}):
        assert closest_handler(GrandChild, mapping) is child
    assert closest_handler(GrandChild, {Base: base}) is base


def test_multiple_inheritance_follows_the_python_mro():
    mixin, child = ModuleHandler(constant(macs=1)), ModuleHandler(constant(macs=2))
    assert Both.__mro__.index(Mixin) < Both.__mro__.index(Child)
    for mapping in ({Child: child, Mixin: mixin}, {Mixin: mixin, Child: child}):
        assert closest_handler(Both, mapping) is mixin


def test_virtual_subclasses_outside_the_mro_do_not_match():
    assert issubclass(GrandChild, Marker)
    assert closest_handler(GrandChild, {Marker: ModuleHandler(constant(macs=1))}) is None
    assert closest_handler(nn.ReLU, {Base: ModuleHandler(constant(macs=1))}) is None


def test_crawl_selects_the_closest_registration_for_each_call():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.child, self.grand = Child(), GrandChild()

        def forward(self, x):
            return self.grand(self.child(x))

    report = crawl_module(Pair(), (3,), custom_modules={
        Base: ModuleHandler(constant(**{**SIX, "macs": 1})),
        GrandChild: ModuleHandler(constant(**{**SIX, "macs": 5})),
    })
    validate_report(report)
    macs = {layer["path"]: layer["metrics"].get("macs", {}).get("value") for layer in report["layers"]}
    assert macs["child"] == 1 and macs["grand"] == 5
    assert report["totals"]["macs"]["value"] == 1 + 5


# -- validation of callback results ------------------------------------------------------------------------------------

HANDLER = ModuleHandler(estimate_nothing)
LABEL = HANDLER.label


def test_numbers_become_complete_results_and_zero_stays_zero():
    validated = validate_estimates({"macs": 0, "module_flops": 6.0, "receptive_field": [3, 5]}, HANDLER)
    assert validated.problems == [] and not validated.invalid_whole
    assert validated.metrics["macs"] == {"status": "complete", "value": 0, "known_value": 0, "unit": "MACs",
                                         "scope": "module_call", "method": LABEL}
    assert validated.metrics["module_flops"]["value"] == 6 and type(validated.metrics["module_flops"]["value"]) is int
    assert validated.metrics["receptive_field"]["value"] == [3, 5]


def test_none_means_unavailable_without_a_problem():
    validated = validate_estimates({"dmas": None}, HANDLER)
    assert validated.metrics["dmas"]["status"] == "unavailable" and validated.problems == []


def test_structured_results_keep_their_status_and_append_their_method():
    raw = {"status": "partial", "value": None, "known_value": 16, "unit": "FLOPs", "scope": "anything",
           "method": "real_multiplies_only"}
    result = validate_estimates({"module_flops": raw}, ModuleHandler(estimate_nothing, {"module_flops"})
                                ).metrics["module_flops"]
    assert result["status"] == "partial" and result["known_value"] == 16 and result["value"] is None
    assert result["scope"] == "subtree"  # normalized to the declared ownership
    assert result["method"] == f"{LABEL}:real_multiplies_only"


def test_builtin_handler_results_keep_their_own_method():
    builtin = ModuleHandler(estimate_nothing, method="formula:test")
    raw = {"status": "complete", "value": 3, "known_value": 3, "unit": "MACs", "scope": "module_call",
           "method": "formula:test"}
    assert validate_estimates({"macs": raw}, builtin).metrics["macs"]["method"] == "formula:test"


@pytest.mark.parametrize("field, value", [
    ("macs", True),
    ("macs", -3),
    ("macs", float("nan")),
    ("macs", float("inf")),
    ("macs", "12"),
    ("macs", [1, 2]),  # lists are for receptive-field fields only
    ("receptive_field", [3, -1]),
    ("dmas", {"status": "complete", "value": 3, "known_value": 4, "unit": "DMAs", "scope": "s", "method": "m"}),
    ("dmas", {"status": "complete", "value": 3, "known_value": 3, "unit": "MACs", "scope": "s", "method": "m"}),
    ("dmas", {"status": "partial", "value": 3, "known_value": 3, "unit": "DMAs", "scope": "s", "method": "m"}),
    ("dmas", {"status": "complete", "value": 3, "known_value": 3}),
])
def test_invalid_fields_become_unavailable_with_a_problem_and_others_survive(field, value):
    validated = validate_estimates({field: value, "effective_stride": 2}, HANDLER)
    assert validated.metrics[field]["status"] == "unavailable"
    assert [name for name, _ in validated.problems] == [field]
    assert validated.metrics["effective_stride"]["status"] == "complete"
    assert not validated.invalid_whole


@pytest.mark.parametrize("raw", [None, 5, [("macs", 1)], {"macs": 1, "flops": 2}])
def test_a_non_mapping_or_an_unknown_name_invalidates_the_whole_result(raw):
    validated = validate_estimates(raw, HANDLER)
    assert validated.invalid_whole
    assert set(validated.metrics) == METRIC_FIELDS
    assert all(result["status"] == "unavailable" for result in validated.metrics.values())
    assert validated.problems and validated.problems[0][0] is None


def test_only_requested_fields_are_kept():
    validated = validate_estimates(SIX, HANDLER, requested=frozenset({"macs"}))
    assert set(validated.metrics) == {"macs"}


def test_crawl_turns_a_failing_callback_into_a_diagnostic():
    def explode(call):
        raise RuntimeError("boom")

    report = crawl_module(Child(), (3,), custom_modules={Child: ModuleHandler(explode)})
    validate_report(report)
    codes = {item["code"] for item in report["diagnostics"]}
    assert "handler_exception" in codes
    assert all(result["status"] == "unavailable" for result in report["layers"][0]["metrics"].values())
    assert report["totals"]["macs"]["status"] == "unavailable"


def test_crawl_turns_an_invalid_field_into_a_diagnostic_and_keeps_valid_ones():
    report = crawl_module(Child(), (3,), custom_modules={Child: ModuleHandler(constant(**{**SIX, "macs": -1}))})
    validate_report(report)
    metrics = report["layers"][0]["metrics"]
    assert metrics["macs"]["status"] == "unavailable"
    assert metrics["module_flops"] == {"status": "complete", "value": 8, "known_value": 8, "unit": "FLOPs",
                                       "scope": "module_call", "method": metrics["module_flops"]["method"]}
    invalid = [item for item in report["diagnostics"] if item["code"] == "invalid_handler_result"]
    assert [item["metric"] for item in invalid] == ["macs"]
    assert invalid[0]["path"] == "" and invalid[0]["call_index"] == 0


def test_callbacks_receive_the_actual_call_objects():
    seen = []

    def record(call: ModuleCall):
        seen.append(call)
        return SIX

    x = torch.ones(2, 3)
    module = Child()
    crawl_module(module, args=(x,), custom_modules={Child: ModuleHandler(record)})
    (call,) = seen
    assert call.module is module and call.args[0] is x and call.output is x and call.kwargs == {}
    with pytest.raises(AttributeError):
        call.output = None  # frozen


def test_handlers_may_say_a_receptive_field_is_not_applicable_but_not_a_count():
    not_applicable = {"status": "not_applicable", "value": None, "known_value": None, "unit": "elements",
                      "scope": "module_call", "method": "flattening"}
    validated = validate_estimates({"receptive_field": not_applicable}, ModuleHandler(lambda call: {}))
    assert validated.problems == [] and validated.metrics["receptive_field"]["status"] == "not_applicable"
    counted = {**not_applicable, "unit": "MACs"}
    validated = validate_estimates({"macs": counted}, ModuleHandler(lambda call: {}))
    assert validated.metrics["macs"]["status"] == "unavailable" and validated.problems


# -- values a formula returns -------------------------------------------------------------------------------------


def test_formula_values_are_filled_in_with_unit_scope_and_method():
    builtin = ModuleHandler(estimate_nothing, frozenset({"dmas"}), method="formula:test")
    validated = validate_estimates({"macs": Incomplete(7), "dmas": Incomplete(), "receptive_field": NOT_APPLICABLE,
                                    "module_flops": None}, builtin)
    assert validated.problems == [] and validated.reasons == {}
    assert validated.metrics["macs"] == {"status": "partial", "value": None, "known_value": 7, "unit": "MACs",
                                         "scope": "module_call", "method": "formula:test"}
    assert validated.metrics["dmas"] == {"status": "unavailable", "value": None, "known_value": None, "unit": "DMAs",
                                         "scope": "subtree", "method": "formula:test"}
    assert validated.metrics["receptive_field"]["status"] == "not_applicable"
    assert validated.metrics["module_flops"]["status"] == "unavailable"


def test_a_formula_value_says_what_is_missing_and_invalid_ones_are_refused():
    validated = validate_estimates({"macs": Incomplete(4, "the gate work is not counted"),
                                    "dmas": Incomplete(-1), "module_flops": NOT_APPLICABLE}, HANDLER)
    assert validated.reasons == {"macs": "the gate work is not counted"}
    assert validated.metrics["macs"]["known_value"] == 4
    assert {name for name, _ in validated.problems} == {"dmas", "module_flops"}
    assert validated.metrics["dmas"]["status"] == validated.metrics["module_flops"]["status"] == "unavailable"


def test_the_diagnostic_of_an_incomplete_field_quotes_what_the_formula_said_is_missing():
    callback = constant(**{**SIX, "macs": Incomplete(4, "the gate work is not counted")})
    report = analyze(Child(), (3,), custom_modules={Child: ModuleHandler(callback)})
    (finding,) = [item for item in report["diagnostics"] if item["code"] == "incomplete_handler_estimate"]
    assert finding["metric"] == "macs" and finding["message"].endswith(": the gate work is not counted")


# -- reading the call's arguments --------------------------------------------------------------------------------


def test_module_call_argument_reads_a_positional_or_keyword_argument():
    module = nn.Linear(2, 2)
    positional = ModuleCall(module, (1, 2), {}, None)
    keyword = ModuleCall(module, (1,), {"offsets": 2}, None)
    assert positional.argument(0, "input") == keyword.argument(0, "input") == 1
    assert positional.argument(1, "offsets") == keyword.argument(1, "offsets") == 2
    assert keyword.argument(2, "weights", None) is None  # omitted: the forward's own default
    assert ModuleCall(module, (), {"input": 0}, None).argument(0, "input", 5) == 0  # a falsy value, not the default


def test_a_missing_argument_without_a_default_is_a_clear_error():
    with pytest.raises(TypeError, match=r"Linear has no argument 'input' \(neither positional argument 0 nor "
                                        r"keyword 'input'\)"):
        ModuleCall(nn.Linear(2, 2), (), {"x": 1}, None).argument(0, "input")


# -- the call context ----------------------------------------------------------------------------------------------


def test_the_call_context_is_a_named_immutable_record_with_defaults():
    context = CallContext(path="a", call_index=0, type_name="T", leaf=True, caller=None, builtin=None,
                          needed=frozenset({"macs"}))
    assert context.where == {"path": "a", "call_index": 0} and context.direct is None and not context.expanded
    assert context.opened_by is None and context._replace(expanded=True).expanded
    with pytest.raises(AttributeError):
        context.leaf = False  # type: ignore[misc]
