"""Shared pytest set-up: import the package from this checkout, and check every report analyzed in this process.

Every report that ``crawl_module`` or ``summary`` builds while the tests run (whatever test builds it, and however
it is called) is validated against the shipped JSON Schema and its MetricResult invariants, must be written by ``json.dumps`` as
is, and must share no list or dict between two places: the check wraps the analysis itself (``torchscan.crawler.analyze``), so a report that breaks
the contract fails the test that produced it. Reports analyzed in other processes (the ``torchscan-report``
workers of the end-to-end tests) are outside this check; those tests read the JSON files the workers wrote.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
for entry in (ROOT, ROOT / "site_models", ROOT / "tests", ROOT / "tests" / "integrations"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

@pytest.fixture(scope="session", autouse=True)
def _every_report_is_validated() -> Iterator[None]:
    from torchscan_testing import VALIDATED, assert_nothing_shared

    from torchscan import crawler
    from torchscan.schema import validate_report

    analyze = crawler.analyze

    def validated_analysis(*args: Any, **kwargs: Any) -> dict[str, Any]:
        report = analyze(*args, **kwargs)
        validate_report(report)
        json.dumps(report)
        assert_nothing_shared(report)
        VALIDATED["reports"] += 1
        return report

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crawler, "analyze", validated_analysis)
        yield


@pytest.fixture
def atomic_block_builtin(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Register a built-in inclusive handler for ``extension_fixtures.AtomicBlock`` (FLOPs and MACs owned) in
    ``DEFAULT_HANDLERS`` for one test; returns its recording callback."""
    from extension_fixtures import BLOCK_ESTIMATE, AtomicBlock, Recorder

    from torchscan import ModuleHandler
    from torchscan.builtin_handlers import DEFAULT_HANDLERS

    callback = Recorder(BLOCK_ESTIMATE)
    handler = ModuleHandler(callback, frozenset({"module_flops", "macs"}), method="formula:test_block")
    monkeypatch.setitem(DEFAULT_HANDLERS, AtomicBlock, handler)
    return callback
