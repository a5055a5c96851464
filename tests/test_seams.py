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


#: Module and global hook registrations: only the tracer makes them.
MODULE_HOOKS = {"register_forward_hook", "register_forward_pre_hook", "register_module_forward_hook",
                "register_module_forward_pre_hook", "register_full_backward_hook", "register_full_backward_pre_hook",
                "register_module_full_backward_hook", "register_module_full_backward_pre_hook", "register_backward_hook",
                "register_module_backward_hook"}


def _names_used(tree: ast.Module) -> set[str]:
    return {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} | {
        node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}


def test_only_the_tracer_registers_module_hooks() -> None:
    """Features subscribe to the tracer's calls (`torchscan.tracing.CallSubscriber`); none hooks modules itself.
    (The training step's autograd-node hooks, which enter a layer call's backward scope while its node runs, are
    graph hooks on the step's own nodes, not module hooks.)"""
    hooking = {where: sorted(_names_used(tree) & MODULE_HOOKS) for where, tree in _modules()
               if where != "torchscan/tracing.py" and _names_used(tree) & MODULE_HOOKS}
    assert not hooking, f"module hooks registered outside torchscan/tracing.py: {hooking}"


#: The layers above the engine: the package face, the site builder, the views and what prints them.
ABOVE_THE_ENGINE = ("torchscan/__init__.py", "torchscan/report/", "torchscan/views/", "torchscan/text.py")


def _imported_modules(where: str, tree: ast.Module) -> set[str]:
    """Absolute names of the package's modules that a module imports (relative imports resolved)."""
    package = where.removesuffix(".py").replace("/", ".").rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            if node.module:
                found.add(f"{base}.{node.module}")
            else:  # ``from .. import crawler`` names modules; ``from .. import __version__`` names the face
                found.update(base if alias.name.startswith("__") else f"{base}.{alias.name}"
                             for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_engine_imports_no_view_code_and_not_the_package_face() -> None:
    upward = {}
    for where, tree in _modules():
        if where.startswith(ABOVE_THE_ENGINE):
            continue
        wrong = sorted(name for name in _imported_modules(where, tree)
                       if name == "torchscan" or name.startswith(("torchscan.views", "torchscan.report")))
        if wrong:
            upward[where] = wrong
    assert not upward, f"engine modules importing upward: {upward}"


def test_the_core_lookup_is_given_the_third_party_tables() -> None:
    """The MRO walk is the core's; `torchscan.integrations` holds tables and imports no core lookup code."""
    for where, tree in _modules():
        if where.startswith("torchscan/integrations/"):
            imported = _imported_modules(where, tree)
            assert not {"torchscan.builtin_handlers", "torchscan.inheritance", "torchscan.crawler"} & imported, where


def _record_writes(tree: ast.Module) -> list[int]:
    """Lines that assign into a layer record (``layer[...] = ``, ``record[...][...] += ``)."""
    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign) else []
        for target in [item for assigned in targets
                       for item in (assigned.elts if isinstance(assigned, ast.Tuple) else [assigned])]:
            while isinstance(target, ast.Subscript):
                target = target.value
                if isinstance(target, ast.Name) and target.id in ("layer", "record"):
                    lines.append(node.lineno)
    return lines


def test_layer_records_are_assembled_once_and_never_written_afterwards() -> None:
    """`torchscan.records.layer_record` builds every layer record from its call's parts; nothing else in the engine
    writes into one (the site builder's own records are registry and catalog rows, not layer records)."""
    writes = {where: lines for where, tree in _modules()
              if where != "torchscan/records.py" and not where.startswith("torchscan/report/")
              and (lines := _record_writes(tree))}
    assert not writes, f"layer records written outside torchscan/records.py: {writes}"
