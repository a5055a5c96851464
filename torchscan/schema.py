"""The wire format of a report: its version, the shipped JSON Schema, and validation."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

#: Bumped only for changes that break consumers; additive fields keep the version (see docs/schema.md).
SCHEMA_VERSION = 1
SCHEMA_FILE = "report.schema.json"


@cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that every report satisfies, as shipped inside the package."""
    return json.loads(resources.files("torchscan").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


def validate_report(report: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when ``report`` breaks the schema (needs the ``jsonschema`` package)."""
    import jsonschema

    jsonschema.validate(report, report_schema(), cls=jsonschema.Draft202012Validator)
