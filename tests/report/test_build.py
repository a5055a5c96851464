"""The build as a whole, in-process: atomic replacement of the output, interruption, the standalone site."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from e2e import write_models

from torchscan.report.build import MARKER, BuildOptions, OutputFolderError, build, previous_output
from torchscan.report.progress import Progress
from torchscan.report.registry import load_registry
from torchscan.report.site import folder_nav, theme_safe

REGISTRY = """
[catalog]
title = "In-process zoo"

[[models]]
name = "tiny"
factory = "e2e_models:tiny"
input_shape = [3, 8, 8]
"""


def in_process(jobs: int, timeout: float) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=jobs)


def interrupted(job: dict[str, Any]) -> dict[str, Any]:
    raise KeyboardInterrupt


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def test_standalone_build_then_an_interrupted_one_leaves_it_intact(tmp_path: Path) -> None:
    write_models(tmp_path)
    (tmp_path / "models.toml").write_text(REGISTRY)
    registry = load_registry(tmp_path / "models.toml")
    output = tmp_path / "site"
    options = BuildOptions(output=output, jobs=1, timeout=60)
    result = build(registry, options, Progress(io.StringIO()), executor_factory=in_process)
    assert result.exit_code == 0 and (output / MARKER).is_file()
    home = (output / "index.html").read_text()
    # The standalone site: the catalog is the home page, with the Models section (and Methodology when shipped).
    assert "In-process zoo" in home and 'href="models/tiny.html"' in home and "reports/tiny.html" in home
    assert (output / "markdown" / "catalog.md").read_text().count("[tiny](tiny.md)") == 1
    before = snapshot(output)
    with pytest.raises(KeyboardInterrupt):
        build(registry, BuildOptions(output=output, jobs=1, timeout=60, use_cache=False), Progress(io.StringIO()),
              executor_factory=lambda jobs, timeout: _interrupting(jobs))
    assert snapshot(output) == before
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".")) == []


def _interrupting(jobs: int) -> ThreadPoolExecutor:
    pool = ThreadPoolExecutor(max_workers=jobs)
    submit = pool.submit
    pool.submit = lambda function, *args: submit(interrupted, *args)  # type: ignore[method-assign]
    return pool


def test_output_folder_rules(tmp_path: Path) -> None:
    assert previous_output(tmp_path / "absent") is None
    (tmp_path / "empty").mkdir()
    assert previous_output(tmp_path / "empty") is None
    (tmp_path / "ours").mkdir()
    (tmp_path / "ours" / MARKER).write_text("")
    assert previous_output(tmp_path / "ours") == tmp_path / "ours"
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "index.html").write_text("")
    with pytest.raises(OutputFolderError, match="not a torchscan-report output folder"):
        previous_output(tmp_path / "theirs")
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputFolderError):
        previous_output(tmp_path / "file")


def test_generated_nav_and_theme_safe_names(tmp_path: Path) -> None:
    for relative in ("index.md", "b.md", "a.md", "guide/intro.md", "guide/index.md", "empty-dir/x.txt"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("# t\n")
    assert folder_nav(tmp_path, tmp_path) == ["index.md", "a.md", "b.md", {"Guide": ["guide/index.md",
                                                                                      "guide/intro.md"]}]
    assert theme_safe('A <b> & "c"') == "A ‹b› ＆ ”c”"
