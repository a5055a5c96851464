"""The build as a whole, in-process: atomic replacement of the output, interruption, the standalone site."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from e2e import write_models

import torchscan
from torchscan.report.build import MARKER, BuildOptions, BuildResult, OutputFolderError, build, previous_output
from torchscan.report.registry.parsing import load_registry
from torchscan.report.review.catalog_view import catalog_view
from torchscan.report.runs.progress import Progress, outcome_label
from torchscan.report.site.mkdocs_site import folder_nav, methodology_source, theme_safe

REGISTRY = """
[catalog]
title = "In-process zoo"

[[models]]
name = "tiny"
factory = "e2e_models:tiny"
input_shape = [3, 8, 8]
"""
VARIANTS = """
[[models]]
name = "wide"
factory = "e2e_models:tiny"
input_shape = [3, 8, 8]

[[models.variants]]
name = "default"

[[models.variants]]
name = "narrow"
kwargs = {width = 2}
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
    if methodology_source() is not None:  # the shipped schema page links to the schema file beside it
        assert 'href="report.schema.json"' in (output / "methodology" / "schema.html").read_text()
        assert (output / "methodology" / "report.schema.json").read_bytes() == (
            Path(torchscan.__file__).parent / "report.schema.json").read_bytes()
    # No page of a standalone site asks for Google Fonts: it works offline.
    assert not [path for path in output.rglob("*.html") if "fonts.googleapis" in path.read_text()]
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


MIXED = REGISTRY + """
[[models]]
name = "incomplete"
factory = "e2e_models:incomplete"
input_shape = [4]
"""


@pytest.mark.parametrize("strict", [False, True])
def test_progress_and_summary_count_complete_partial_and_failed_runs(tmp_path: Path, strict: bool) -> None:
    write_models(tmp_path)
    (tmp_path / "models.toml").write_text(MIXED)
    registry = load_registry(tmp_path / "models.toml")
    stream = io.StringIO()
    result = build(registry, BuildOptions(output=tmp_path / "site", jobs=1, timeout=60, strict=strict),
                   Progress(stream), executor_factory=in_process)
    lines = stream.getvalue().splitlines()
    assert "[1/2] tiny: ok" in lines
    # A progress line never says "ok" for a run the summary then counts as failed.
    assert ("[2/2] incomplete: failed (strict: incomplete)" if strict else "[2/2] incomplete: ok, partial") in lines
    assert result.catalog.counts == {"complete": 1, "partial": 0 if strict else 1, "failed": 1 if strict else 0}
    assert result.summary_line().startswith("2 runs: 1 complete, " + ("0 partial, 1 failed" if strict
                                                                      else "1 partial, 0 failed"))
    strict_failure = ("FAILED incomplete: Strict check failed: the MACs, module FLOPs, DMAs and operator FLOPs "
                      "totals are lower bounds or unavailable; 1 layer call has incomplete estimates.")
    assert result.failure_lines() == ([strict_failure] if strict else [])


def forward_failure(layer: str | None) -> dict[str, Any]:
    """A failure record as the worker writes it when a forward raised (``layer`` "" for the root module)."""
    error = {"stage": "forward", "type": "ValueError", "message": "this layer cannot run\nsecond line"}
    return {"status": "failed", "error": error if layer is None else {**error, "layer": layer}}


def test_the_closing_failure_lines_name_the_failing_layer(tmp_path: Path) -> None:
    (tmp_path / "models.toml").write_text(REGISTRY + VARIANTS)
    registry = load_registry(tmp_path / "models.toml")
    results = {"tiny": forward_failure("1.1"), "wide": forward_failure(""), "wide.narrow": forward_failure(None)}
    lines = BuildResult(tmp_path / "site", catalog_view(registry, results, strict=False)).failure_lines()
    assert lines == ["FAILED tiny: forward stage, ValueError: this layer cannot run (failing layer 1.1)",
                     "FAILED wide: forward stage, ValueError: this layer cannot run (failing layer (root))",
                     "FAILED wide.narrow: forward stage, ValueError: this layer cannot run"]
    # The page's notice names the layer on a line of its own, so its first line keeps the cause alone.
    run = catalog_view(registry, results, strict=False).entries[0].primary
    assert (run.cause, run.failing_layer) == ("forward stage, ValueError: this layer cannot run", "1.1")


def test_outcome_labels() -> None:
    partial = {"status": "ok", "report": {"totals": {"macs": {"status": "partial"}}, "layers": []}}
    complete = {"status": "ok", "report": {"totals": {"macs": {"status": "complete"}}, "layers": []}}
    assert outcome_label("ok", complete, strict=True) == "ok"
    assert outcome_label("cached", partial, strict=False) == "cached, partial"
    assert outcome_label("cached", partial, strict=True) == "cached, failed (strict: incomplete)"
    assert outcome_label("failed (build: RuntimeError)", {"status": "failed"}, strict=True) == (
        "failed (build: RuntimeError)")
