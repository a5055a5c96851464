"""Where the registry's callables live, found without importing anything.

``check`` uses this to say "this module does not exist" or "it defines no such name" before any model runs, and the
cache hashes the source files found here, so an edited model definition is analyzed again.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Sequence
from importlib.machinery import PathFinder
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checks import CALLABLE_PATTERN, did_you_mean

if TYPE_CHECKING:
    from .parsing import Entry


def locate_module(module: str, folder: Path) -> Path | None:
    """The source file of ``module`` (``a.b.c``), searching the registry folder first, then ``sys.path``, with
    `PathFinder`, which never executes a package's ``__init__``; ``None`` for modules without source."""
    search = [str(folder), *[entry for entry in sys.path if entry != str(folder)]]
    parts = module.split(".")
    for position in range(1, len(parts)):
        package = PathFinder.find_spec(".".join(parts[:position]), search)
        if package is None or not package.submodule_search_locations:
            return None
        search = list(package.submodule_search_locations)
    spec = PathFinder.find_spec(module, search)
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def callable_problem(target: str, folder: Path) -> str | None:
    """Why ``module:callable`` cannot be found, or ``None`` when it can (or when only running it could tell)."""
    module, _, attribute = target.partition(":")
    path = locate_module(module, folder)
    if path is None:
        return f"module {module!r} was not found in the registry's folder or on sys.path"
    names = top_level_names(path)
    head = attribute.split(".")[0]
    if names is not None and head not in names:
        public = sorted(name for name in names if not name.startswith("_"))
        return f"module {module!r} ({path.name}) defines no top-level name {head!r}{did_you_mean(head, public)}"
    return None


def lookup_problems(entries: Sequence[Entry], folder: Path) -> list[str]:
    """``models[0] (name): factory: module 'zoo' ... (did you mean 'my_net'?)`` for every callable or mapping the
    entries name that cannot be found (a malformed path is skipped: its form is reported as it is read)."""
    problems = []
    for index, entry in enumerate(entries):
        targets = {("factory", entry.factory)}
        targets |= {("inputs", run.inputs.callable) for run in entry.runs if run.inputs.callable}
        for run in entry.runs[:1]:
            targets |= set(run.extensions.items())
        where = f"models[{index}]" + (f" ({entry.name})" if entry.name else "")
        for key, target in sorted(targets):
            problem = callable_problem(target, folder) if CALLABLE_PATTERN.match(target) else None
            if problem:
                problems.append(f"{where}: {key}: {problem}")
    return problems


def top_level_names(path: Path) -> frozenset[str] | None:
    """Names a module binds at top level, or ``None`` if reading cannot tell (syntax errors, ``*``, ``__getattr__``)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=path.name)
    except (SyntaxError, UnicodeDecodeError, OSError):
        return None
    names: set[str] = set()
    for node in tree.body:
        names.update(_bound_names(node))
    if "*" in names or "__getattr__" in names:
        return None
    return frozenset(names)


def _bound_names(node: ast.stmt) -> set[str]:
    """The names one top-level statement binds (definitions, imports, assignments, and inside if/try/with)."""
    for kinds, names in _BINDERS:
        if isinstance(node, kinds):
            return names(node)
    return set()


def _imported(node: Any) -> set[str]:
    return {(alias.asname or alias.name).split(".")[0] for alias in node.names}


def _assigned(node: Any) -> set[str]:
    return {name.id for target in node.targets for name in ast.walk(target) if isinstance(name, ast.Name)}


def _target(node: Any) -> set[str]:
    return {node.target.id} if isinstance(node.target, ast.Name) else set()


def _nested(node: Any) -> set[str]:
    return {name for child in _inner_statements(node) for name in _bound_names(child)}


_BINDERS: tuple[tuple[tuple[type, ...], Callable[[Any], set[str]]], ...] = (
    ((ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef), lambda node: {node.name}),
    ((ast.Import, ast.ImportFrom), _imported),
    ((ast.Assign,), _assigned),
    ((ast.AnnAssign, ast.AugAssign), _target),
    ((ast.If, ast.Try, ast.With), _nested),
)


def _inner_statements(node: ast.If | ast.Try | ast.With) -> list[ast.stmt]:
    """The statements of every branch of a compound statement (conditional imports bind names too)."""
    inner = [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]
    for handler in getattr(node, "handlers", []):
        inner.extend(handler.body)
    return inner
