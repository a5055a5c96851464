"""The build cache keeps a run's last good result through failures: linked from the failure, replaced by the next
success, never counted in the catalog."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from torchscan.report.build import BuildOptions, BuildResult, build
from torchscan.report.registry.parsing import load_registry
from torchscan.report.runs.progress import Progress
from torchscan.report.runs.result_cache import CACHE_FOLDER, LAST_GOOD_INDEX

REGISTRY = """
[[models]]
name = "steady"
factory = "{module}:steady"
input_shape = [4]

[[models]]
name = "flaky"
factory = "{module}:net"
input_shape = [4]
"""
GOOD = "from torch import nn\n\ndef steady():\n    return nn.Linear(4, 2)\n\ndef net():\n    return nn.Linear(4, {})\n"
BROKEN = GOOD.replace("    return nn.Linear(4, {})", "    raise RuntimeError('a transient failure')")


def in_process(jobs: int, timeout: float) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=jobs)


def build_with(folder: Path, module: str, source: str, use_cache: bool = True) -> BuildResult:
    """Build the registry with its models in ``module`` (a new module each time: this process imports it once),
    holding ``source``."""
    (folder / f"{module}.py").write_text(source, encoding="utf-8")
    (folder / "models.toml").write_text(REGISTRY.format(module=module), encoding="utf-8")
    registry = load_registry(folder / "models.toml")
    return build(registry, BuildOptions(output=folder / "site", jobs=1, timeout=60, use_cache=use_cache),
                 Progress(io.StringIO()), executor_factory=in_process)


def cached_keys(site: Path) -> dict[str, str]:
    return json.loads((site / CACHE_FOLDER / LAST_GOOD_INDEX).read_text(encoding="utf-8"))


def cache_files(site: Path) -> set[str]:
    return {path.stem for path in (site / CACHE_FOLDER).glob("*.json")} - {Path(LAST_GOOD_INDEX).stem}


def test_a_failed_run_keeps_its_last_good_report_until_a_new_one_replaces_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    assert build_with(tmp_path, "flaky_first", GOOD.format(3)).exit_code == 0
    good_report = (site / "reports" / "flaky.json").read_bytes()
    good_key = cached_keys(site)["flaky"]

    failed = build_with(tmp_path, "flaky_broken", BROKEN)
    assert failed.exit_code == 1
    line = ("FAILED flaky: build stage, RuntimeError: a transient failure; last good report kept: "
            f"reports/flaky.last-good.html, inputs hash {good_key[:12]}")
    assert failed.failure_lines() == [line]
    # The last good result survives in the cache and as files of its own, marked as from an earlier build.
    assert cached_keys(site)["flaky"] == good_key and good_key in cache_files(site)
    assert not (site / "reports" / "flaky.json").exists()
    assert (site / "reports" / "flaky.last-good.json").read_bytes() == good_report
    kept = (site / "reports" / "flaky.last-good.html").read_text(encoding="utf-8")
    assert f"From an earlier build (inputs hash {good_key[:12]})" in kept
    # The failure page, the model page and the catalog row link it; its numbers stay out of the catalog.
    assert 'href="flaky.last-good.html"' in (site / "reports" / "flaky.html").read_text(encoding="utf-8")
    page = (site / "models" / "flaky.html").read_text(encoding="utf-8")
    assert 'href="../reports/flaky.last-good.html"' in page and f"inputs hash <code title=\"{good_key}\">" in page
    catalog = (site / "markdown" / "catalog.md").read_text(encoding="utf-8")
    assert "| [flaky](flaky.md) | — | — | — | failed (build: RuntimeError) | [HTML](../reports/flaky.html) " \
           "· [last good](../reports/flaky.last-good.html) |" in catalog
    assert f"inputs hash `{good_key[:12]}`" in catalog
    assert "Not drawn: flaky (failed)." in (site / "index.html").read_text(encoding="utf-8")  # out of the charts

    # Still failing, even with --no-cache: the last good result is kept again (not only one build long).
    assert build_with(tmp_path, "flaky_still_broken", BROKEN, use_cache=False).exit_code == 1
    assert cached_keys(site)["flaky"] == good_key and (site / "reports" / "flaky.last-good.json").is_file()

    # A new success replaces it: the old result leaves the cache and the last-good files go.
    assert build_with(tmp_path, "flaky_fixed", GOOD.format(5)).exit_code == 0
    assert cached_keys(site)["flaky"] != good_key and good_key not in cache_files(site)
    assert not list((site / "reports").glob("*.last-good.*"))
    assert '"macs"' in (site / "reports" / "flaky.json").read_text(encoding="utf-8")
