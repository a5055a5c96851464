"""Headless Chromium for the browser tests, driven by Playwright for Python.

Playwright's own browser download is not needed (nor possible offline): it drives the system Chromium through
``executable_path``. A `Tab` is one page of that browser, with the page errors it raised and a few helpers the
tests share (open a local file, measure, screenshot).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")
#: The viewport most checks use: a common laptop width, where the Material content column is about 765 px wide.
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


def find_chromium() -> str | None:
    """The system Chromium (Debian installs it as /usr/bin/chromium)."""
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Tab:
    """One page in its own browser context (its own viewport and colour scheme), with its JavaScript errors."""

    page: Any  # playwright.sync_api.Page
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))

    def open(self, path: Path) -> None:
        """Load a local file (``file://``, as a reader opening the site from disk) and wait for its load event."""
        self.page.goto(path.resolve().as_uri(), wait_until="load")

    def evaluate(self, expression: str, argument: Any = None) -> Any:
        return self.page.evaluate(expression, argument)

    def click(self, selector: str) -> None:
        self.page.locator(selector).first.click()

    def count(self, selector: str) -> int:
        return self.page.locator(selector).count()

    def screenshot(self, path: Path, full_page: bool = False) -> bytes:
        path.parent.mkdir(parents=True, exist_ok=True)
        return self.page.screenshot(path=str(path), full_page=full_page)


def new_tab(browser: Any, viewport: dict[str, int] | None = None, color_scheme: str = "light") -> Tab:
    """A fresh context (no shared state between tests) with one page; local files may load local files."""
    context = browser.new_context(viewport=viewport or DESKTOP, color_scheme=color_scheme)
    return Tab(context.new_page())
