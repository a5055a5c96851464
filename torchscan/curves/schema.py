"""The wire format of a cost curve: the shipped JSON Schema, and validation against it and against the data.

A cost curve (`torchscan.curves.cost_curve`) holds report totals, so its points are checked with the report schema's own
definitions; and every piece of a curve must reproduce every point that lies on its lattice, which no JSON
Schema can express. Needs the ``jsonschema`` package (the ``test`` extra), like `torchscan.schema.validate_report`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache, partial
from importlib import resources
from typing import Any

from ..schema import report_schema
from .cost_curve import counts_of_point
from .exact_fit import evaluate_piece, on_lattice

__all__ = ["CURVE_SCHEMA_FILE", "cost_curve_schema", "validate_cost_curve"]

CURVE_SCHEMA_FILE = "cost_curve.schema.json"


@cache
def cost_curve_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `torchscan.curves.cost_curve`'s result, as shipped inside the package."""
    return json.loads(resources.files("torchscan.curves").joinpath(CURVE_SCHEMA_FILE).read_text(encoding="utf-8"))


def _report_part(definition: Mapping[str, Any]) -> Any:
    """A validator of one part of a report, with the report schema's definitions in reach of its references."""
    import jsonschema

    return jsonschema.Draft202012Validator({**definition, "$defs": report_schema()["$defs"]})


def _check_pieces(curve: Mapping[str, Any]) -> None:
    """Every piece reproduces the count of every point on its lattice."""
    import jsonschema

    counts = {point["size"]: counts_of_point(point) for point in curve["points"]}
    for name, fitted in curve["curves"].items():
        for piece in fitted["pieces"]:
            for size in filter(partial(on_lattice, piece), counts):
                value, formula = counts[size].get(name), evaluate_piece(piece, size)
                if formula != value:
                    raise jsonschema.ValidationError(f"curves.{name}: the piece {piece} gives {formula} at size "
                                                     f"{size}, the point has {value}")


def validate_cost_curve(curve: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when ``curve`` breaks its schema, a point breaks the report schema's
    ``totals`` or ``inputs.kv_cache``, the points are not the sizes in order, or a piece contradicts a point."""
    import jsonschema

    jsonschema.Draft202012Validator(cost_curve_schema()).validate(curve)
    if [point["size"] for point in curve["points"]] != curve["sizes"]:
        raise jsonschema.ValidationError("points must hold one point per size, in the order of sizes")
    totals = _report_part(report_schema()["properties"]["totals"])
    kv_cache = _report_part({"$ref": "#/$defs/kv_cache"})
    for point in curve["points"]:
        totals.validate(point["totals"])
        if "kv_cache" in point:
            kv_cache.validate(point["kv_cache"])
    _check_pieces(curve)
