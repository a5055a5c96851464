"""Callables are located by reading files, never by importing them: ``check`` cannot run a model's code."""

from __future__ import annotations

from pathlib import Path

from torchscan.report.registry.callables import callable_problem, locate_module, top_level_names


def make_package(root: Path) -> None:
    package = root / "zoo_pkg"
    package.mkdir()
    # Importing this package would fail: locating must not execute it.
    (package / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    (package / "vision.py").write_text(
        "import torch as t\nfrom os import path as p\n\nclass ResNet:\n    pass\n\ndef small():\n    pass\n\n"
        "alias = small\nWIDTH: int = 4\nif True:\n    guarded = 1\n")
    (root / "starry.py").write_text("from os import *\n")


def test_locate_walks_packages_without_executing_them(tmp_path: Path) -> None:
    make_package(tmp_path)
    assert locate_module("zoo_pkg.vision", tmp_path) == tmp_path / "zoo_pkg" / "vision.py"
    assert locate_module("zoo_pkg.missing", tmp_path) is None
    assert locate_module("not_there_at_all", tmp_path) is None
    # Installed modules are found on sys.path; extension modules have no source.
    assert locate_module("json.decoder", tmp_path).name == "decoder.py"


def test_top_level_names_and_problems(tmp_path: Path) -> None:
    make_package(tmp_path)
    names = top_level_names(tmp_path / "zoo_pkg" / "vision.py")
    assert {"t", "p", "ResNet", "small", "alias", "WIDTH", "guarded"} <= names
    assert callable_problem("zoo_pkg.vision:ResNet.small", tmp_path) is None
    assert callable_problem("zoo_pkg.vision:alias", tmp_path) is None
    assert callable_problem("zoo_pkg.vision:tiny", tmp_path) == (
        "module 'zoo_pkg.vision' (vision.py) defines no top-level name 'tiny'")
    # A misspelled name gets the closest public name the module defines, as a misspelled key does.
    assert callable_problem("zoo_pkg.vision:smal", tmp_path) == (
        "module 'zoo_pkg.vision' (vision.py) defines no top-level name 'smal' (did you mean 'small'?)")
    assert callable_problem("zoo_pkg.nothing:f", tmp_path) == (
        "module 'zoo_pkg.nothing' was not found in the registry's folder or on sys.path")
    # A star import makes the names unknowable statically: no false alarm.
    assert top_level_names(tmp_path / "starry.py") is None
    assert callable_problem("starry:anything", tmp_path) is None
