"""Rendering once: an entry's reports, charts and pages are reused from the render cache while their inputs are
unchanged, drawn again when they change, and the output is the same bytes with or without the cache and whether
one process or a pool drew them."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from e2e import write_models

from torchscan.report.build import BuildOptions, build
from torchscan.report.cache import CACHE_FOLDER
from torchscan.report.progress import Progress
from torchscan.report.registry import load_registry
from torchscan.report.render import template_folder
from torchscan.report.render_cache import RENDER_FOLDER

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


def render_entries(site: Path) -> list[Path]:
    return sorted((site / CACHE_FOLDER / RENDER_FOLDER).glob("*.json.gz"))


def test_an_unchanged_rebuild_reuses_every_drawing_and_gives_the_same_bytes(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    cold, progress = build_into(tmp_path, "site")
    assert drawn_counts(progress) == (4, 0)
    assert re.search(r"TorchScan [\d.]+ s \(analysis [\d.]+ s, rendering [\d.]+ s, writing [\d.]+ s\), "
                     r"MkDocs [\d.]+ s", progress)
    warm, progress = build_into(tmp_path, "site")
    assert drawn_counts(progress) == (0, 4)
    assert warm == cold
    uncached, progress = build_into(tmp_path, "uncached", use_cache=False)
    assert drawn_counts(progress) == (4, 0) and uncached == cold
    # Five stored drawings: the four entries and the catalog; a rebuild keeps only the ones it used.
    assert len(render_entries(tmp_path / "site")) == 5


def test_a_pool_of_processes_draws_the_same_bytes_as_one_process(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    alone, _ = build_into(tmp_path, "alone", jobs=1)
    pooled, progress = build_into(tmp_path, "pooled", jobs=2)
    assert drawn_counts(progress) == (4, 0)
    assert pooled == alone


def test_corrupt_or_mislabelled_cache_entries_are_drawn_again(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    cold, _ = build_into(tmp_path, "site")
    entries = render_entries(tmp_path / "site")
    entries[0].write_bytes(b"not gzip")
    stored = json.loads(gzip.decompress(entries[1].read_bytes()))
    stored["key"] = "another"
    entries[1].write_bytes(gzip.compress(json.dumps(stored).encode()))
    again, progress = build_into(tmp_path, "site")
    drawn, reused = drawn_counts(progress)
    assert drawn + reused == 4 and drawn >= 1  # the two bad files: entries (redrawn) or the catalog (redrawn)
    assert again == cold
    assert drawn_counts(build_into(tmp_path, "site")[1]) == (0, 4)


def test_a_changed_template_or_result_is_drawn_again(tmp_path: Path) -> None:
    setup_registry(tmp_path)
    build_into(tmp_path, "site")
    overrides = tmp_path / "templates"
    overrides.mkdir()
    shutil.copy(template_folder() / "model.md.j2", overrides / "model.md.j2")
    with (overrides / "model.md.j2").open("a", encoding="utf-8") as file:
        file.write("\nOverridden footer.\n")
    files, progress = build_into(tmp_path, "site", templates=overrides)
    assert drawn_counts(progress) == (4, 0)
    assert b"Overridden footer." in files["models/second.html"]
    (tmp_path / "models.toml").write_text(REGISTRY.replace("width = 3", "width = 5"), encoding="utf-8")
    _, progress = build_into(tmp_path, "site", templates=overrides)
    assert drawn_counts(progress) == (1, 3)
