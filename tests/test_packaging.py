"""The wheel ships every subpackage, the templates, the schema and the documentation pages."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_for_the_wheel():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "torchscan").rglob("__init__.py")}
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages"
    assert setuptools["package-dir"] == {"torchscan.docs": "docs", "torchscan.templates": "templates"}
    assert {"torchscan.docs", "torchscan.docs.conventions"} <= listed
    assert (ROOT / "docs" / "conventions").is_dir()
    # Every folder of templates/ is a package of the wheel, so setuptools ships its files as package data.
    template_packages = {".".join(("torchscan", *path.relative_to(ROOT).parts)) for path in
                         [ROOT / "templates", *(ROOT / "templates").rglob("*")] if path.is_dir()}
    assert template_packages <= listed, f"add {sorted(template_packages - listed)} to [tool.setuptools] packages"


@pytest.fixture(scope="module")
def built_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files a wheel of this checkout installs, laid out by setuptools' ``build_py`` (what bdist_wheel zips)."""
    target = tmp_path_factory.mktemp("build") / "lib"
    result = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q", "build_py",
                             "--build-lib", str(target)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr
    return target


def test_an_installed_wheel_finds_its_templates_assets_and_docs(built_package: Path, tmp_path: Path) -> None:
    shipped = {path.relative_to(ROOT / "templates").as_posix() for path in (ROOT / "templates").rglob("*")
               if path.is_file()}
    installed = built_package / "torchscan" / "templates"
    assert {path.relative_to(installed).as_posix() for path in installed.rglob("*") if path.is_file()} == shipped
    assert (built_package / "torchscan" / "docs" / "index.md").is_file()
    assert (built_package / "torchscan" / "report.schema.json").is_file()
    assert (built_package / "torchscan" / "curves" / "cost_curve.schema.json").is_file()
    # Imported from the installed layout (not this checkout), the renderer and the site builder find their files.
    script = (
        "import torchscan.report.output.templates as r, torchscan.report.site.mkdocs_site as s\n"
        "from torch import nn\n"
        "from torchscan import crawl_module\n"
        "from torchscan.report.output.documents import render_report_file\n"
        "print(r.__file__); print(r.template_folder()); print(s.methodology_source())\n"
        "html = render_report_file(crawl_module(nn.Linear(2, 2), (2,)), 'html', title='wheel')\n"
        "print('<title>wheel' in html and 'data-ts-tree' in html)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(built_package)}, check=False)
    assert result.returncode == 0, result.stderr
    module, templates, docs, rendered = result.stdout.split("\n")[:4]
    assert Path(module).is_relative_to(built_package)
    assert Path(templates) == installed and Path(docs) == built_package / "torchscan" / "docs"
    assert rendered == "True"
