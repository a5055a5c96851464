"""The seams of the package, held by reading its source: one walker of call values (`torchscan.values`) and one
tracer that owns every hook (`torchscan.tracing`). A feature that walks call values or hooks the model on its own
fails here, with the place named."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "torchscan"
CONTAINER_NAMES = {"tuple", "list", "dict", "Mapping", "Sequence", "MutableMapping"}


def _modules() -> list[tuple[str, ast.Module]]:
    return [(str(path.relative_to(PACKAGE.parent)), ast.parse(path.read_text()))
            for path in sorted(PACKAGE.rglob("*.py"))]


def _checks_containers(function: ast.AST) -> bool:
    """Whether a function tests a value against a container type (``isinstance(value, (tuple, list))``...)."""
    for node in ast.walk(function):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance":
            names = {item.id for item in ast.walk(node.args[1]) if isinstance(item, ast.Name)}
            if names & CONTAINER_NAMES:
                return True
    return False


def _recurses(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            called = node.func
            name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", None)
            if name == function.name:
                return True
    return False


def test_only_the_values_module_recurses_into_containers() -> None:
    """A function that tests for containers and calls itself is a walker; in a module that imports torch (the only
    modules that hold call values: the others read reports and registries, JSON and TOML) it walks call values,
    and the values module holds the only ones."""
    walkers = []
    for where, tree in _modules():
        if where == "torchscan/values.py" or not _imports_torch(tree):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _recurses(node) \
                    and _checks_containers(node):
                walkers.append(f"{where}:{node.lineno} {node.name}")
    assert not walkers, "recursive walks of call values outside torchscan/values.py:\n" + "\n".join(walkers)


def _imports_torch(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "torch" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            return True
    return False


def test_no_module_uses_pytree_to_walk_values() -> None:
    users = [where for where, tree in _modules() for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.module and "_pytree" in node.module]
    assert not users, f"torch.utils._pytree walks values with another container policy: {users}"
