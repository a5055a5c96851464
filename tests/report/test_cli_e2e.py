"""End to end, as a user runs it: the console script on small registries, broken entries included."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from e2e import BROKEN_REGISTRY, Build, run_cli, write_models

from torchscan.report.site.mkdocs_site import methodology_source

SCRIPT = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


def tree(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}


def test_broken_entries_become_failure_pages_and_the_rest_goes_on(broken_build: Build) -> None:
    result, out = broken_build.result, broken_build.output
    assert result.returncode == 1, result.stderr
    for stem in ("tiny", "tiny.w8", "script", "tagger", "incomplete"):
        assert (out / "reports" / f"{stem}.json").is_file() and (out / "reports" / f"{stem}.html").is_file()
    for stem in ("raises", "hangs", "dies", "badimport"):
        assert not (out / "reports" / f"{stem}.json").exists()
    failures = {stem: (out / "reports" / f"{stem}.html").read_text() for stem in ("raises", "hangs", "dies",
                                                                                   "badimport")}
    assert "factory exploded on purpose" in failures["raises"] and ">build<" in failures["raises"]
    assert "timed out after 8 s; the worker was killed" in failures["hangs"]
    assert "killed by signal SIGKILL" in failures["dies"]
    assert "No module named &#39;no_such_module&#39;" in failures["badimport"]
    for name in ("tiny", "raises", "hangs", "dies", "badimport", "script", "incomplete", "tagger", "catalog"):
        assert (out / "markdown" / f"{name}.md").is_file()
        assert (out / "models" / f"{name}.html").is_file() or name == "catalog"
    assert (out / "index.html").is_file() and (out / ".torchscan-build").is_file()
    page = (out / "markdown" / "raises.md").read_text()
    assert "## Analysis failed" in page and "**RuntimeError**: factory exploded on purpose" in page
    # The failure keeps the user's own frames, with paths relative to the registry folder (no local paths).
    assert 'File "e2e_models.py", line' in page and "in raises" in page
    assert str(broken_build.folder) not in page and "torchscan/report" not in page
    assert "File &#34;e2e_models.py&#34;" in failures["raises"] and "Traceback" in failures["raises"]
    catalog = (out / "markdown" / "catalog.md").read_text()
    assert "| failed (timeout: TimeoutError) |" in catalog and "| failed (worker: WorkerDied) |" in catalog
    assert "| incomplete (strict) |" in catalog and "8 models, 9 runs: 4 complete, 0 partial, 5 failed." in catalog
    assert "- **raises** failed: build stage, RuntimeError: factory exploded on purpose" in catalog
    # The portable snippet promises nothing only the site can do; the site's own catalog page sorts and colours.
    assert "Click a column header" not in catalog and "ts-badge" not in catalog
    home = (out / "index.html").read_text()
    assert "Click a column header to sort" in home and 'class="ts-badge ts-failed"' in home
    strict = (out / "reports" / "incomplete.html").read_text()
    assert "Strict check failed: the MACs, module FLOPs, DMAs and operator FLOPs totals are lower bounds" in strict
    assert "FAILED raises: build stage, RuntimeError: factory exploded on purpose" in result.stderr
    # Complete, partial and failed runs are counted apart: a strict failure is not a success.
    assert "9 runs: 4 complete, 0 partial, 5 failed; site at" in result.stderr
    assert "incomplete: failed (strict: incomplete)" in result.stderr and "incomplete: ok" not in result.stderr
    tagger = json.loads((out / "reports" / "tagger.json").read_text())
    assert tagger["context"]["devices"] == ["meta"] and tagger["inputs"]["args"][0]["device"] == "meta"
    if methodology_source() is not None:  # the shipped documentation pages join every generated site
        assert any((out / "methodology").glob("*.html"))


def test_module_names_are_escaped_in_every_html_and_markdown_file(broken_build: Build) -> None:
    out = broken_build.output
    checked = 0
    for path in out.rglob("*"):
        if path.suffix in (".html", ".md") and path.is_file():
            text = path.read_text(encoding="utf-8")
            assert SCRIPT not in text, path
            assert "<zoo>" not in text, path  # the catalog title is escaped too
            checked += 1
    assert checked > 10
    for path in ("reports/script.html", "markdown/script.md", "models/script.html"):
        assert ESCAPED in (out / path).read_text(encoding="utf-8"), path
    assert json.loads((out / "reports" / "script.json").read_text())["layers"][1]["name"] == SCRIPT


def test_site_build_rebuild_is_byte_identical_and_cached(site_build: Build) -> None:
    out, log = site_build.output, site_build.folder / "factory-calls.log"
    assert site_build.result.returncode == 0, site_build.result.stderr
    assert log.read_text().count("built") == 3  # tiny (two variants) and tagger
    # The catalog joined the existing site: its own home page, the catalog under models/, its nav section.
    home = (out / "index.html").read_text()
    assert "Welcome." in home and "models/catalog.html" in home and ">Costs<" in home.replace("\n", "").replace(" ", "")
    assert (out / "models" / "catalog.html").is_file() and (out / "models" / "tiny.html").is_file()
    # The layer tree is excluded from search; the rest of the page is indexed.
    index = json.loads((out / "search" / "search_index.json").read_text())
    tiny_docs = [doc for doc in index["docs"] if doc["location"].startswith("models/tiny.html")]
    assert tiny_docs and not any("Conv2d" in doc["text"] for doc in tiny_docs)
    assert "Conv2d" in (out / "models" / "tiny.html").read_text()
    before = tree(out)
    again = run_cli("build", site_build.registry, "--output", out, "--jobs", "2", cwd=site_build.folder)
    assert again.returncode == 0, again.stderr
    assert "[1/3] tiny: cached" in again.stderr and ": ok" not in again.stderr
    assert log.read_text().count("built") == 3  # no model was built again
    after = tree(out)
    assert sorted(after) == sorted(before)
    assert [name for name in after if after[name] != before[name]] == []


def test_a_failed_site_build_leaves_the_previous_output_intact(site_build: Build, tmp_path: Path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(site_build.folder, folder, ignore=shutil.ignore_patterns("out"))
    output = tmp_path / "out"
    shutil.copytree(site_build.output, output)
    before = tree(output)
    (folder / "docs-site" / "docs" / "index.md").write_text("# Docs\n\n[broken](missing.md)\n")
    (folder / "docs-site" / "mkdocs.yml").write_text((folder / "docs-site" / "mkdocs.yml").read_text()
                                                     + "strict: true\n")
    result = run_cli("build", folder / "models.toml", "--output", output, cwd=folder)
    assert result.returncode == 1 and "the MkDocs build failed" in result.stderr
    assert "missing.md" in result.stderr
    assert tree(output) == before
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # temporary folder removed


def test_registry_and_usage_errors_exit_2_and_write_nothing(tmp_path: Path) -> None:
    write_models(tmp_path)
    (tmp_path / "bad.toml").write_text(BROKEN_REGISTRY.replace('factory = "e2e_models:raises"', 'factroy = "x:y"'))
    result = run_cli("build", "bad.toml", "--output", "out", cwd=tmp_path)
    assert result.returncode == 2 and not (tmp_path / "out").exists()
    assert "models[1] (raises): factroy: unknown key (did you mean 'factory'?)" in result.stderr
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("keep me")
    (tmp_path / "ok.toml").write_text('[[models]]\nname = "t"\nfactory = "e2e_models:tiny"\ninput_shape = [3, 8, 8]\n')
    result = run_cli("build", "ok.toml", "--output", "taken", cwd=tmp_path)
    assert result.returncode == 2 and "is not a torchscan-report output folder" in result.stderr
    assert [path.name for path in (tmp_path / "taken").iterdir()] == ["notes.txt"]
    result = run_cli("build", "ok.toml", "--jobs", "0", cwd=tmp_path)
    assert result.returncode == 2 and "expected a positive integer" in result.stderr


def test_check_validates_without_running_models(tmp_path: Path) -> None:
    write_models(tmp_path)
    (tmp_path / "models.toml").write_text(BROKEN_REGISTRY.replace("broken_import:f", "no_such_module.deep:f"))
    result = run_cli("check", "models.toml", cwd=tmp_path)
    # The registry is well-formed; only the bad import path is found missing (hangs/dies never ran).
    assert result.returncode == 1
    assert "models[4] (badimport): factory: module 'no_such_module.deep' was not found" in result.stderr
    assert "models.toml: 8 entries (9 runs) valid, but 1 callable cannot be found" in result.stdout
    # The broken registry of the site build is valid: its failures need a worker to show (broken_import fails
    # only when imported).
    (tmp_path / "broken.toml").write_text(BROKEN_REGISTRY)
    assert run_cli("check", "broken.toml", cwd=tmp_path).returncode == 0
    (tmp_path / "good.toml").write_text('[[models]]\nname = "t"\nfactory = "e2e_models:tiny"\ninput_shape = [4]\n')
    good = run_cli("check", "good.toml", cwd=tmp_path)
    assert good.returncode == 0 and "good.toml: 1 entry (1 run) valid" in good.stdout


def test_a_misspelled_dtype_is_reported_with_the_other_mistakes_of_its_entry(tmp_path: Path) -> None:
    write_models(tmp_path)
    (tmp_path / "models.toml").write_text('[[models]]\nname = "t"\nfactory = "e2e_models:tiny"\n'
                                          'input_shpe = [3, 8, 8]\ndtype = "float23"\n')
    result = run_cli("check", "models.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "models[0] (t): input_shpe: unknown key (did you mean 'input_shape'?)" in result.stderr
    assert "models[0] (t): dtype: unknown dtype 'float23'" in result.stderr


def test_render_and_diff_commands(broken_build: Build, tmp_path: Path) -> None:
    reports = broken_build.output / "reports"
    result = run_cli("render", reports / "tiny.json", "--output", tmp_path / "deep" / "tiny.html", "--title", "Tiny",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    html = (tmp_path / "deep" / "tiny.html").read_text()
    assert "<title>Tiny — TorchScan report</title>" in html and "data-ts-tree" in html
    result = run_cli("diff", reports / "tiny.json", reports / "tiny.w8.json", "--output", tmp_path / "review.md",
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    review = (tmp_path / "review.md").read_text()
    # Conv2d 3->4 vs 3->8 channels, kernel 3 on 8x8: 4*6*6*27 = 3888 and 8*6*6*27 = 7776 MACs.
    assert "| MACs | module view | 3.89k | 7.78k | +3.89k | +100.0% | increased |" in review
    assert run_cli("render", reports / "tiny.json", "--output", tmp_path / "x.txt", cwd=tmp_path).returncode == 2
    (tmp_path / "not-a-report.json").write_text("{}")
    bad = run_cli("render", tmp_path / "not-a-report.json", "--output", tmp_path / "x.md", cwd=tmp_path)
    assert bad.returncode == 2 and "is not a TorchScan report" in bad.stderr


@pytest.mark.parametrize("strict", [False, True])
def test_strict_flag_fails_incomplete_entries(tmp_path: Path, strict: bool) -> None:
    """--strict turns an incomplete analysis into a failure (checked on the views: no extra build needed)."""
    from torchscan.report.registry.parsing import load_registry
    from torchscan.report.review.catalog_view import catalog_view
    from torchscan.report.runs.worker import analyze_run

    write_models(tmp_path)
    (tmp_path / "models.toml").write_text(
        '[[models]]\nname = "incomplete"\nfactory = "e2e_models:incomplete"\ninput_shape = [4]\n')
    registry = load_registry(tmp_path / "models.toml")
    results = {run.stem: analyze_run(run.to_job(registry.folder)) for run in registry.runs}
    catalog = catalog_view(registry, results, strict=strict)
    (entry,) = catalog.entries
    assert entry.failed is strict
    assert entry.status == ("incomplete (strict)" if strict else "partial")
