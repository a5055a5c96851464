"""Every model family of the coverage target is complete under ``strict=True`` in both views, with exact parameters
and MACs equal to PyTorch's own count of the same forward's dot products (``FlopCounterMode`` / 2).

transformers runs both attention implementations (``sdpa`` and ``eager``); each model runs on the CPU (with a
padding mask where it takes one) and on ``meta`` where it can be built there. Models are tiny configs with
random weights. torchvision's full-size models are also checked against the GMACs torchvision publishes.
"""

from __future__ import annotations

import pytest
from third_party_models import PUBLISHED, RUNS, analyze, published


@pytest.mark.parametrize("run", list(RUNS))
def test_strict_complete_with_exact_parameters_and_independent_macs(run: str) -> None:
    outcome = analyze(run)
    assert outcome.error is None, f"{run}: {outcome.error}; diagnostics {outcome.diagnostics}"
    assert set(outcome.statuses.values()) == {"complete"}
    assert outcome.parameters == outcome.expected_parameters
    assert outcome.independent_macs > 0
    assert outcome.macs == outcome.independent_macs


@pytest.mark.parametrize("name", PUBLISHED)
def test_torchvision_full_size_models_match_published_gmacs(name: str) -> None:
    """Full size at 224x224 on ``meta``: parameters as published, GMACs as published (to its 3 decimals) and as
    counted by FlopCounterMode."""
    row = published(name)
    assert row["status"] == "complete"
    assert row["parameters"] == row["published_parameters"]
    assert row["macs"] == row["independent_macs"]
    assert abs(row["macs"] / 1e9 - row["published_gmacs"]) <= 0.0005 + 1e-9
