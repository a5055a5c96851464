"""Shared end-to-end fixtures: small registries built once per session with the console script, as a user would,
and one headless Chromium driven by Playwright."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from browser import Tab, find_chromium, new_tab
from e2e import BROKEN_REGISTRY, MKDOCS, SITE_REGISTRY, USER_REGISTRY, Build, run_cli, write_models


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
def user_build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """A user's standalone catalog: PyTorch's nn.Transformer at base size, a partial model, a model that makes torch
    warn, and one whose forward fails inside a layer."""
    folder = tmp_path_factory.mktemp("user")
    write_models(folder)
    registry = folder / "models.toml"
    registry.write_text(USER_REGISTRY, encoding="utf-8")
    output = folder / "out"
    result = run_cli("build", registry, "--output", output, "--jobs", "2", cwd=folder)
    return Build(folder, registry, output, result)


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One headless system Chromium for every browser test; in CI a missing browser fails instead of skipping."""
    executable = find_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    missing = "no Chromium was found (apt-get install -y chromium)" if executable is None else (
        "playwright is not installed (pip install -e '.[test]')" if sync_playwright is None else "")
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {missing}")
        pytest.skip(missing)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True,
                                             args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        yield browser
        browser.close()


@pytest.fixture
def tab(chromium: Any) -> Iterator[Tab]:
    """A fresh page at 1280 px in light mode; its context is closed after the test."""
    opened = new_tab(chromium)
    yield opened
    opened.page.context.close()
