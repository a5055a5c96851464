"""Small builds for the tests of what a build reuses (render cache, page cache, kept site): a registry of four
entries built in this process, its output files read back."""

from __future__ import annotations

import io
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from e2e import write_models

from torchscan.report.build import BuildOptions, build
from torchscan.report.output.templates import template_folder
from torchscan.report.registry.parsing import load_registry
from torchscan.report.runs.progress import Progress
from torchscan.report.runs.result_cache import CACHE_FOLDER

#: Four entries (a pool draws from four on), one with two variants, one failing.
REGISTRY = """
[catalog]
title = "Render cache"

[[models]]
name = "first"
factory = "e2e_models:tiny"
input_shape = [3, 8, 8]
tags = ["cnn"]

[[models.variants]]
name = "w4"

[[models.variants]]
name = "w2"
kwargs = {width = 2}

[[models]]
name = "second"
factory = "e2e_models:tiny"
kwargs = {width = 3}
input_shape = [3, 8, 8]

[[models]]
name = "tagger"
factory = "e2e_models:tagger"
inputs = "e2e_models:tagger_inputs"

[[models]]
name = "broken"
factory = "e2e_models:raises"
input_shape = [4]
"""


def in_process(jobs: int, timeout: float) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=jobs)


def build_into(folder: Path, output: str, jobs: int = 1, use_cache: bool = True, templates: Path | None = None
               ) -> tuple[dict[str, bytes], str]:
    """Build the registry into ``folder/output``: its files (the cache left out) and the progress lines."""
    registry = load_registry(folder / "models.toml")
    lines = io.StringIO()
    build(registry, BuildOptions(output=folder / output, jobs=jobs, timeout=60, use_cache=use_cache,
                                 templates=templates), Progress(lines), executor_factory=in_process)
    site = folder / output
    files = {path.relative_to(site).as_posix(): path.read_bytes() for path in site.rglob("*")
             if path.is_file() and CACHE_FOLDER not in path.parts}
    return files, lines.getvalue()


def drawn_counts(progress: str) -> tuple[int, int]:
    found = re.search(r"rendered \d+ entries: (\d+) drawn, (\d+) reused from the render cache", progress)
    assert found is not None, progress
    return int(found.group(1)), int(found.group(2))


def setup_registry(folder: Path) -> None:
    write_models(folder)
    (folder / "models.toml").write_text(REGISTRY, encoding="utf-8")


def overridden_templates(folder: Path) -> Path:
    """A template folder under ``folder`` whose model page adds a footer: a template change a build must see."""
    overrides = folder / "templates"
    overrides.mkdir()
    shutil.copy(template_folder() / "model.md.j2", overrides / "model.md.j2")
    with (overrides / "model.md.j2").open("a", encoding="utf-8") as file:
        file.write("\nOverridden footer.\n")
    return overrides
