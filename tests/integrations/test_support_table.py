"""The support table of the third-party page is what these tests found: ``docs/third-party-support.json`` must equal
the outcomes of this session's analyses. After a change, regenerate it with
``TORCHSCAN_WRITE_SUPPORT_TABLE=1 python -m pytest tests/integrations``."""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path

from third_party_models import (
    CASES,
    PUBLISHED,
    analyze,
    import_timm,
    import_torchvision,
    import_transformers,
    published,
)

from torchscan.integrations.lookup import FAMILY_RULES, THIRD_PARTY_HANDLERS
from torchscan.integrations.support import SUPPORT_FILE, handlers_table, support_tables

SUPPORT = Path(__file__).resolve().parents[2] / "docs" / SUPPORT_FILE


def generated() -> dict:
    models = []
    for case in CASES:
        runs = []
        for device, variant in case.runs():
            outcome = analyze(case.run_id(device, variant))
            runs.append({"run": "/".join(part for part in (variant, device) if part),
                         "status": "complete" if outcome.error is None else "incomplete",
                         "macs": outcome.macs, "independent_macs": outcome.independent_macs,
                         "parameters": outcome.parameters, "inherited": list(outcome.inherited)})
        parameters = {run.pop("parameters") for run in runs}
        inherited = sorted({name for run in runs for name in run.pop("inherited")})
        assert len(parameters) == 1, f"{case.model}: parameters differ between runs"
        models.append({"library": case.library, "model": case.model, "config": case.config, "runs": runs,
                       "parameters": parameters.pop(), "inherited": inherited})
    rows = [{key: value for key, value in published(name).items() if key != "published_parameters"}
            for name in PUBLISHED]
    versions = {name: metadata.version(name) for name in ("torch", "transformers", "timm", "torchvision")}
    return {"versions": versions, **recognized(), "models": models, "published": rows}


def recognized() -> dict:
    """The classes and family rules of the code, as the page lists them."""
    handlers = [{"class": name, "method": handler.method} for name, handler in sorted(THIRD_PARTY_HANDLERS.items())]
    rules = [{"name": rule.name, "matches": rule.description, "method": rule.handler.method} for rule in FAMILY_RULES]
    return {"handlers": handlers, "rules": rules}


def test_the_support_table_is_what_the_tests_found() -> None:
    import_transformers(), import_timm(), import_torchvision()  # skip without the libraries
    found = generated()
    if os.environ.get("TORCHSCAN_WRITE_SUPPORT_TABLE") == "1":
        SUPPORT.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    recorded = json.loads(SUPPORT.read_text(encoding="utf-8"))
    # Versions say what the table was generated with; a newer library must still give the same rows.
    compared = ("handlers", "rules", "models", "published")
    assert {key: recorded[key] for key in compared} == {key: found[key] for key in compared}
    assert set(recorded["versions"]) == set(found["versions"])
    rendered = support_tables(recorded)
    assert all(f"| {model['model']} |" in rendered for model in recorded["models"])
    assert all(f"| `{row['class']}` |" in handlers_table(recorded) for row in recorded["handlers"])
