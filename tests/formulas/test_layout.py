"""The formulas package is organized by job: operator costs never import module-view or Transformer files."""

from __future__ import annotations

import ast
from pathlib import Path

FORMULAS = Path(__file__).resolve().parents[2] / "torchscan" / "formulas"


def relative_imports(path: Path) -> set[str]:
    """The relative modules a file imports, resolved against ``torchscan.formulas`` (``modules.norm``, ...)."""
    package = path.parent.relative_to(FORMULAS).parts
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(package[: len(package) - (node.level - 1)]) if node.level > 1 else list(package)
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(target)
            found.update(f"{target}.{alias.name}".lstrip(".") for alias in node.names)
    return found


def test_operator_costs_import_no_module_view_or_transformer_file():
    for path in sorted((FORMULAS / "operators").glob("*.py")):
        imported = relative_imports(path)
        offending = sorted(name for name in imported if name.split(".")[0] in ("modules", "transformer"))
        assert not offending, f"{path.name} imports {offending}"


def test_module_view_files_do_not_import_the_operator_table():
    for path in sorted((FORMULAS / "modules").glob("*.py")):
        offending = sorted(name for name in relative_imports(path) if name.split(".")[0] == "operators")
        assert not offending, f"{path.name} imports {offending}"


def test_the_resolver_sees_shared_conventions():
    imported = relative_imports(FORMULAS / "operators" / "recurrent.py")
    assert "conventions" in imported and "conventions.step_flops" in imported
