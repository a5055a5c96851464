"""MetricResult: constructors, validation, normalization and aggregation of statuses.

These are the rules every number in a report follows: a complete value equals its known value, a lower bound is
never shown as a value, nothing unknown becomes a zero, and booleans, negatives and non-finite numbers are refused.
"""

from __future__ import annotations

import math

import pytest
import torch

from torchscan.results import (
    METRIC_RESULT_KEYS,
    METRIC_UNITS,
    add_results,
    complete,
    is_count,
    is_incomplete,
    is_spatial_value,
    lower_bound,
    normalized,
    not_applicable,
    not_requested,
    plain_number,
    unavailable,
    validation_error,
)

KEYS = {"status", "value", "known_value", "unit", "scope", "method"}


# -- constructors -------------------------------------------------------------------------------------------------

def test_metric_result_has_exactly_six_keys():
    assert METRIC_RESULT_KEYS == KEYS
    for result in (complete(3, "MACs", "module_call", "m"), lower_bound(2, "MACs", "module_call", "m"),
                   unavailable("MACs", "module_call", "m"), not_applicable("elements", "module_call", "m"),
                   not_requested("FLOPs", "model")):
        assert set(result) == KEYS
        assert validation_error(result) is None


def test_complete_repeats_the_value_as_known_value():
    assert complete(12, "FLOPs", "module_call", "formula:x") == {
        "status": "complete", "value": 12, "known_value": 12, "unit": "FLOPs", "scope": "module_call",
        "method": "formula:x"}


def test_complete_zero_is_a_legitimate_value():
    result = complete(0, "MACs", "module_call", "formula:x")
    assert result["status"] == "complete" and result["value"] == 0 and result["known_value"] == 0


def test_partial_hides_the_value_and_keeps_the_lower_bound():
    result = lower_bound(7, "DMAs", "module_call", "m")
    assert result["status"] == "partial" and result["value"] is None and result["known_value"] == 7


def test_unavailable_not_applicable_and_not_requested_carry_no_numbers():
    for result, status in ((unavailable("MACs", "s", "m"), "unavailable"),
                           (not_applicable("elements", "s", "m"), "not_applicable"),
                           (not_requested("MACs", "s"), "not_requested")):
        assert result["status"] == status
        assert result["value"] is None and result["known_value"] is None
    assert not_requested("MACs", "s")["method"] == "not_requested"


def test_metric_units_name_the_six_fields():
    assert METRIC_UNITS == {"module_flops": "FLOPs", "macs": "MACs", "dmas": "DMAs", "receptive_field": "elements",
                            "effective_stride": "elements", "effective_padding": "elements"}


# -- counts -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [0, 1, 2.5, 10**15])
def test_is_count_accepts_finite_non_negative_numbers(value):
    assert is_count(value)


@pytest.mark.parametrize("value", [True, False, -1, -0.5, math.inf, math.nan, "3", None, [1]])
def test_is_count_rejects_booleans_negatives_non_finite_and_non_numbers(value):
    assert not is_count(value)


def test_spatial_values_are_a_count_or_a_non_empty_list_of_counts():
    assert is_spatial_value(3) and is_spatial_value([3, 5]) and is_spatial_value((1, 1))
    assert not is_spatial_value([]) and not is_spatial_value([3, -1]) and not is_spatial_value([True])


def test_plain_number_turns_integral_floats_and_tensors_into_ints():
    assert plain_number(4.0) == 4 and isinstance(plain_number(4.0), int)
    assert plain_number(2.5) == 2.5
    assert plain_number(torch.tensor(6)) == 6 and isinstance(plain_number(torch.tensor(6)), int)
    assert plain_number([3.0, 5]) == [3, 5]


def test_normalized_makes_numbers_plain_without_touching_status():
    result = normalized({"status": "partial", "value": None, "known_value": torch.tensor(9.0), "unit": "MACs",
                         "scope": "module_call", "method": "m"})
    assert result["known_value"] == 9 and type(result["known_value"]) is int
    assert result["status"] == "partial" and result["value"] is None


# -- validation ---------------------------------------------------------------------------------------------------

def _result(**changes):
    base = {"status": "complete", "value": 4, "known_value": 4, "unit": "MACs", "scope": "module_call", "method": "m"}
    base.update(changes)
    return base


def test_valid_results_have_no_validation_error():
    assert validation_error(_result()) is None
    assert validation_error(_result(status="partial", value=None, known_value=3)) is None
    assert validation_error(_result(status="unavailable", value=None, known_value=None)) is None
    assert validation_error(_result(value=[3, 5], known_value=[3, 5], unit="elements"), spatial=True) is None
    assert validation_error(_result(value=4.0, known_value=4)) is None  # the same number in two types


@pytest.mark.parametrize("broken, words", [
    (_result(value=4, known_value=5), "complete"),
    (_result(value=None, known_value=4), "complete"),
    (_result(value=True, known_value=True), "complete"),
    (_result(value=-1, known_value=-1), "complete"),
    (_result(value=math.inf, known_value=math.inf), "complete"),
    (_result(value=math.nan, known_value=math.nan), "complete"),
    (_result(status="partial", value=3, known_value=3), "partial"),
    (_result(status="partial", value=None, known_value=None), "partial"),
    (_result(status="partial", value=None, known_value=-2), "partial"),
    (_result(status="unavailable", value=None, known_value=0), "unavailable"),
    (_result(status="exact"), "status"),
    (_result(method=""), "method"),
    (_result(scope=None), "scope"),
])
def test_validation_error_explains_each_broken_result(broken, words):
    problem = validation_error(broken)
    assert problem is not None and words in problem


def test_validation_error_requires_exactly_the_six_keys():
    missing = _result()
    del missing["scope"]
    assert "scope" in validation_error(missing)
    assert "extra" in validation_error({**_result(), "coverage": 0.5})
    assert "mapping" in validation_error(4)


def test_validation_error_checks_the_unit_of_the_field():
    assert "unit" in validation_error(_result(unit="FLOPs"), unit="MACs")
    assert validation_error(_result(), unit="MACs") is None


def test_lists_are_only_valid_for_spatial_fields():
    listed = _result(value=[3, 5], known_value=[3, 5], unit="elements")
    assert validation_error(listed) is not None
    assert validation_error(listed, spatial=True) is None
    assert validation_error(_result(value=[3, 5], known_value=[3, 6], unit="elements"), spatial=True) is not None


def test_is_incomplete_flags_only_partial_and_unavailable():
    assert is_incomplete(lower_bound(1, "MACs", "s", "m")) and is_incomplete(unavailable("MACs", "s", "m"))
    for result in (complete(1, "MACs", "s", "m"), not_applicable("elements", "s", "m"), not_requested("MACs", "s")):
        assert not is_incomplete(result)


# -- aggregation ----------------------------------------------------------------------------------------------------

def _sum(*results):
    return add_results(results, "MACs", "model", "sum")


def test_sum_of_complete_results_is_complete():
    total = _sum(complete(3, "MACs", "s", "a"), complete(4.0, "MACs", "s", "b"), complete(0, "MACs", "s", "c"))
    assert total == {"status": "complete", "value": 7, "known_value": 7, "unit": "MACs", "scope": "model",
                     "method": "sum"}


def test_a_partial_part_makes_the_sum_a_lower_bound():
    total = _sum(complete(3, "MACs", "s", "a"), lower_bound(4, "MACs", "s", "b"))
    assert total["status"] == "partial" and total["value"] is None and total["known_value"] == 3 + 4


def test_an_unavailable_part_makes_the_sum_a_lower_bound_of_the_known_parts():
    total = _sum(complete(5, "MACs", "s", "a"), unavailable("MACs", "s", "b"))
    assert total["status"] == "partial" and total["known_value"] == 5


def test_nothing_known_is_unavailable_never_zero():
    total = _sum(unavailable("MACs", "s", "a"), unavailable("MACs", "s", "b"))
    assert total["status"] == "unavailable" and total["value"] is None and total["known_value"] is None


def test_an_empty_sum_is_an_exact_zero():
    assert _sum()["status"] == "complete" and _sum()["value"] == 0


def test_not_applicable_parts_contribute_nothing():
    total = _sum(complete(2, "MACs", "s", "a"), not_applicable("MACs", "s", "b"))
    assert total["status"] == "complete" and total["value"] == 2


def test_only_unrequested_parts_stay_not_requested():
    total = _sum(not_requested("MACs", "s"), not_requested("MACs", "s"))
    assert total["status"] == "not_requested" and total["value"] is None


def test_aggregation_accepts_a_generator_once():
    total = add_results((complete(n, "MACs", "s", "a") for n in (1, 2, 3)), "MACs", "model", "sum")
    assert total["value"] == 6


def test_sums_of_complete_integers_and_of_floats_add_in_order_from_zero():
    integers = _sum(*(complete(n, "MACs", "s", "a") for n in (2**62, 2**62, 1)))
    assert integers["status"] == "complete" and integers["value"] == 2**63 + 1 and type(integers["value"]) is int
    floats = _sum(complete(0.1, "MACs", "s", "a"), complete(0.2, "MACs", "s", "b"), complete(3, "MACs", "s", "c"))
    assert floats["value"] == 0.1 + 0.2 + 3  # the loop's own order, not a compensated sum

