"""The extension tutorial (docs/extending.md) runs as written, and keeps the guide's examples and promises.

Its ``python`` blocks execute top to bottom in one namespace, like a reader pasting them into one session; the
tests then check what the page claims about the objects it built, that the guide's three examples (vendored in
tests/data/extending/, checked against the guide by test_extending_examples.py) are on the page unchanged, and that
the page links only to pages that exist.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from torchscan.schema import validate_report

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "extending.md"
GUIDE_EXAMPLES = ROOT / "tests" / "data" / "extending"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def python_blocks() -> list[tuple[int, str]]:
    """(line of the opening fence, code) for each ```python block at the margin of the page."""
    text = PAGE.read_text(encoding="utf-8")
    return [(text.count("\n", 0, match.start()) + 1, match.group(1)) for match in FENCE.finditer(text)]


@pytest.fixture(scope="module")
def page_namespace() -> dict[str, Any]:
    """Run every block in order in one namespace, as the page promises."""
    namespace: dict[str, Any] = {"__name__": "extending_page"}
    for line, code in python_blocks():
        exec(compile("\n" * line + code, str(PAGE), "exec"), namespace)  # noqa: S102 - running our own page
    return namespace


def test_every_block_runs_in_order(page_namespace):
    assert len(python_blocks()) >= 10
    assert "<!-- not executed" not in PAGE.read_text(encoding="utf-8")


def test_every_report_on_the_page_matches_the_schema(page_namespace):
    reports = [value for value in page_namespace.values() if isinstance(value, dict) and "schema_version" in value]
    assert len(reports) >= 10
    for report in reports:
        validate_report(report)


def test_the_guides_examples_hold_on_the_page(page_namespace):
    # ComplexScale: 2 x 4 complex elements at 6 real FLOPs each, in both views.
    assert page_namespace["report"]["totals"]["module_flops"]["value"] == 6 * 2 * 4
    assert page_namespace["report"]["totals"]["operator_flops"]["value"] == 6 * 2 * 4
    # ComplexPair: the inclusive 12 FLOPs per element over 8 elements, MACs delegated to the children.
    pair = page_namespace["pair_report"]
    assert pair["totals"]["module_flops"]["value"] == 12 * 8
    assert pair["totals"]["macs"] == {**pair["totals"]["macs"], "status": "complete", "value": 0}
    # lower_bound_scale: four real multiplies per element are a lower bound.
    flops = page_namespace["partial_report"]["layers"][0]["metrics"]["module_flops"]
    assert (flops["status"], flops["known_value"]) == ("partial", 4 * 8)


def test_the_pages_own_examples_hold(page_namespace):
    block = page_namespace["block_report"]
    assert block["layers"][0]["metric_ownership"] == dict.fromkeys(("dmas", "macs", "module_flops"), "subtree")
    assert block["totals"]["dmas"]["value"] == 4 * 16 + 16 * 16 + 16 + 4 * 4 * 16
    assert page_namespace["warped"]["totals"]["dmas"]["value"] == 2 * 8 + 8 * 8 + 2 * 8
    assert page_namespace["evidence"]["totals"]["macs"]["status"] == "complete"
    closed = page_namespace["closed"]
    tokens, features, hidden, sequence = 5, 8, 16, 5
    assert closed["totals"]["macs"]["value"] == (tokens * 4 * features * features + 2 * tokens * sequence * features
                                                 + 2 * tokens * features * hidden)


def test_the_page_names_the_diagnostics_it_explains():
    text = PAGE.read_text(encoding="utf-8")
    for code in ("incomplete_handler_estimate", "invalid_handler_result", "handler_exception",
                 "module_forward_error", "expanded_atomic_boundary"):
        assert f"`{code}`" in text


def test_links_point_at_existing_pages():
    targets = re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", PAGE.read_text(encoding="utf-8"))
    assert targets
    assert [target for target in targets if not (PAGE.parent / target).exists()] == []


def test_the_guides_examples_are_on_the_page_verbatim():
    code = "\n".join(block for _, block in python_blocks())
    examples = sorted(GUIDE_EXAMPLES.glob("*.txt"))
    assert len(examples) == 3
    for path in examples:
        assert path.read_text(encoding="utf-8").strip() in code, f"{path.name} is not on the page unchanged"
