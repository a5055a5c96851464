"""The wheel ships every subpackage, the templates, the schema and the documentation pages."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_for_the_wheel():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "torchscan").rglob("__init__.py")}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages"
    assert setuptools["package-dir"] == {"torchscan.docs": "docs"}
    assert {"torchscan.docs", "torchscan.docs.conventions"} <= listed
    assert (ROOT / "docs" / "conventions").is_dir()
