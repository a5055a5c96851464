"""The report's vocabulary is defined once, in ``torchscan/results.py``: the summable metric set, the scope strings
and the pointwise receptive-field values. These tests read the package's source and fail on a second definition."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

from torchscan.results import POINTWISE_SPATIAL, SCOPES, SUMMABLE_METRICS

PACKAGE = Path(__file__).resolve().parents[1] / "torchscan"
RESULTS = PACKAGE / "results.py"
SOURCES = sorted(path for path in PACKAGE.rglob("*.py") if path != RESULTS)
#: The site builder reads reports; its own modules are checked for the summable set and pointwise values only.
ENGINE_SOURCES = [path for path in SOURCES if "report" not in path.relative_to(PACKAGE).parts[:-1]]

NAME = '"(?:module_flops|macs|dmas)"'
#: Any collection literal of exactly the three summable names, in any order.
SUMMABLE_LITERAL = re.compile(rf"[(\[{{]\s*{NAME}\s*,\s*{NAME}\s*,\s*{NAME}\s*,?\s*[)\]}}]")
POINTWISE_LITERAL = re.compile(r'"receptive_field"\s*:\s*1\s*,\s*"effective_stride"\s*:\s*1\s*,\s*'
                               r'"effective_padding"\s*:\s*0\b')


def relative(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def test_the_vocabulary_has_the_values_of_the_report_contract():
    assert SUMMABLE_METRICS == ("module_flops", "macs", "dmas")
    assert SCOPES == ("module_call", "subtree", "direct", "inclusive", "model", "part")
    assert dict(POINTWISE_SPATIAL) == {"receptive_field": 1, "effective_stride": 1, "effective_padding": 0}
    with pytest.raises(TypeError):
        POINTWISE_SPATIAL["receptive_field"] = 2  # type: ignore[index]  # shared: read-only


def test_the_summable_metric_set_is_defined_once():
    assert len(SUMMABLE_LITERAL.findall(RESULTS.read_text())) == 1
    found = [relative(path) for path in SOURCES if SUMMABLE_LITERAL.search(path.read_text())]
    assert found == [], f"import SUMMABLE_METRICS from torchscan.results instead of repeating it in {found}"


def test_the_pointwise_receptive_field_values_are_defined_once():
    assert len(POINTWISE_LITERAL.findall(RESULTS.read_text())) == 1
    found = [relative(path) for path in SOURCES if POINTWISE_LITERAL.search(path.read_text())]
    assert found == [], f"use torchscan.results.POINTWISE_SPATIAL instead of repeating it in {found}"


def scope_literals(source: str, label: str) -> list[str]:
    """Scope strings written as literal arguments of a call (``lower_bound(n, unit, "subtree", method)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            arguments = itertools.chain(node.args, (keyword.value for keyword in node.keywords))
            found += [f"{label}:{arg.lineno} {arg.value!r}" for arg in arguments
                      if isinstance(arg, ast.Constant) and arg.value in SCOPES]
    return found


def test_scope_strings_are_not_spelled_out_where_a_result_is_built():
    found = [hit for path in ENGINE_SOURCES for hit in scope_literals(path.read_text(), relative(path))]
    assert found == [], f"use the scope constants of torchscan.results: {found}"


def test_the_checks_would_see_a_second_definition():
    """The patterns match the spellings they are meant to catch (so the tests above can fail)."""
    assert SUMMABLE_LITERAL.search('SUMMABLE = frozenset({"dmas", "module_flops", "macs"})')
    assert SUMMABLE_LITERAL.search('FIELDS = ("module_flops", "macs", "dmas",)')
    assert not SUMMABLE_LITERAL.search('("module_flops", "macs", "dmas", "operator_flops")')
    assert POINTWISE_LITERAL.search('POINTWISE = {"receptive_field": 1, "effective_stride": 1, "effective_padding": 0}')
    source = ('x = unavailable("MACs", "module_call", "m")\ny = add_results(r, u, scope="subtree", method=m)\n'
              'z = layer["operator_flops"]["direct"]\n')
    assert [hit.split(" ", 1)[1] for hit in scope_literals(source, "example")] == ["'module_call'", "'subtree'"]
