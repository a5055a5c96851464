"""The cost curve's wire format: the shipped JSON Schema, the report schema for its points, and the data itself."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest
import torch
from torch import nn

from torchscan import cost_curve
from torchscan.curves.schema import cost_curve_schema, validate_cost_curve


@pytest.fixture(scope="module")
def curve() -> dict[str, Any]:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.ReLU())
    return cost_curve(model, list(range(8, 20)), lambda size: ((torch.zeros(1, 3, size, size),), {}))


def test_a_cost_curve_satisfies_its_schema(curve: dict[str, Any]) -> None:
    assert curve["curves"]["macs"]["kind"] == "piecewise"  # odd and even sizes: one piece each
    validate_cost_curve(curve)
    assert cost_curve_schema()["properties"]["schema_version"] == {"const": curve["schema_version"]}


def _broken(curve: dict[str, Any], edit: Any) -> dict[str, Any]:
    broken = copy.deepcopy(curve)
    edit(broken)
    return broken


@pytest.mark.parametrize(("edit", "message"), [
    (lambda c: c["curves"]["macs"]["pieces"][0]["coefficients"].__setitem__(0, "1"), "curves.macs: the piece"),
    (lambda c: c["points"].reverse(), "one point per size, in the order of sizes"),
    (lambda c: c["curves"]["macs"].update(kind="polynomial"), "is too long"),
    (lambda c: c["curves"]["dmas"]["pieces"][0]["coefficients"].__setitem__(0, "0.5"), "does not match"),
    (lambda c: c["points"][0]["totals"].pop("macs"), "'macs' is a required property"),
    (lambda c: c.update(schema_version="2"), "'1' was expected"),
], ids=["contradicting-piece", "reordered-points", "kind", "float-coefficient", "totals", "version"])
def test_a_broken_curve_is_refused_with_the_place(curve: dict[str, Any], edit: Any, message: str) -> None:
    with pytest.raises(jsonschema.ValidationError, match=message):
        validate_cost_curve(_broken(curve, edit))
