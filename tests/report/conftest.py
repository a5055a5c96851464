"""Shared end-to-end fixtures: small registries built once per session with the console script, as a user would,
and one headless Chromium."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from browser import Browser, find_chromium
from e2e import BROKEN_REGISTRY, MKDOCS, SITE_REGISTRY, Build, run_cli, write_models


@pytest.fixture(scope="session")
def broken_build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    folder = tmp_path_factory.mktemp("broken")
    write_models(folder)
    registry = folder / "models.toml"
    registry.write_text(BROKEN_REGISTRY, encoding="utf-8")
    output = folder / "out"
    result = run_cli("build", registry, "--output", output, "--jobs", "4", "--timeout", "8", cwd=folder)
    return Build(folder, registry, output, result)


@pytest.fixture(scope="session")
def site_build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """A registry joined to an existing MkDocs site; built once here (the tests rebuild it themselves)."""
    folder = tmp_path_factory.mktemp("site")
    write_models(folder)
    log = folder / "factory-calls.log"
    registry = folder / "models.toml"
    registry.write_text(SITE_REGISTRY.replace("LOG", log.as_posix()), encoding="utf-8")
    docs = folder / "docs-site" / "docs"
    docs.mkdir(parents=True)
    (folder / "docs-site" / "mkdocs.yml").write_text(MKDOCS, encoding="utf-8")
    (docs / "index.md").write_text("# Our docs\n\nWelcome.\n", encoding="utf-8")
    output = folder / "out"
    result = run_cli("build", registry, "--output", output, "--jobs", "2", cwd=folder)
    return Build(folder, registry, output, result)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """One headless Chromium for every browser test; in CI a missing browser fails instead of skipping."""
    executable = find_chromium()
    if executable is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no Chromium was found (apt-get install -y chromium)")
        pytest.skip("no Chromium installed")
    instance = Browser(executable)
    yield instance
    instance.close()
