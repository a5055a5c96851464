"""Code-shape limits of the package, as radon measures them: no function over 40 lines, no cyclomatic complexity
over 12. Ruff's C901 counts fewer branches than radon, so radon is the measure that is enforced here."""

from __future__ import annotations

import ast
from pathlib import Path

from radon import complexity as radon_complexity

PACKAGE = Path(__file__).resolve().parents[1] / "torchscan"
MAX_LINES = 40
MAX_COMPLEXITY = 12


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _functions(tree: ast.AST):
    return (node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


def test_the_package_has_sources() -> None:
    assert len(_sources()) > 50


def test_no_function_is_longer_than_the_limit() -> None:
    too_long = []
    for path in _sources():
        for node in _functions(ast.parse(path.read_text())):
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                too_long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({lines} lines)")
    assert not too_long, "functions over 40 lines:\n" + "\n".join(too_long)


def test_no_function_is_more_complex_than_the_limit() -> None:
    too_complex = []
    for path in _sources():
        for block in radon_complexity.cc_visit(path.read_text()):
            if block.complexity > MAX_COMPLEXITY:
                too_complex.append(f"{path.relative_to(PACKAGE.parent)}:{block.lineno} {block.fullname} "
                                   f"({block.complexity})")
    assert not too_complex, "functions over cyclomatic complexity 12:\n" + "\n".join(too_complex)
