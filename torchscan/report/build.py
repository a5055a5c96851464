"""``torchscan-report build``: analyze every registry run, write reports and Markdown, build the site, swap it in.

Everything is written to a temporary folder beside the output and renamed into place at the end, so an
interrupted or failed build leaves the previous output untouched. Only this (main) process writes files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .cache import CACHE_FOLDER, ResultCache
from .catalog import CatalogView, catalog_view
from .catalog_index import CATALOG_INDEX, catalog_index
from .documents import BuildCharts, build_charts, build_documents, site_pages
from .progress import Progress
from .registry import Registry
from .runner import ExecutorFactory, isolated_executor, run_all
from .site import SiteContent, build_site

MARKER = ".torchscan-build"


class OutputFolderError(ValueError):
    """The output folder exists and is not a previous torchscan-report output (it will not be replaced)."""


@dataclass
class BuildOptions:
    output: Path
    jobs: int
    timeout: float
    use_cache: bool = True
    strict: bool = False
    templates: Path | None = None


@dataclass
class BuildResult:
    output: Path
    catalog: CatalogView
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 1 if self.catalog.failed else 0

    def summary_line(self) -> str:
        """``11 runs: 8 complete, 2 partial, 1 failed; site at …``: a partial run is not counted as a success."""
        return f"{self.catalog.counts_text}; site at {self.output / 'index.html'}"

    def failure_lines(self) -> list[str]:
        """``FAILED stem: reason`` for every failed run, in registry order, saying when its last good report from an
        earlier build was kept."""
        return [f"FAILED {run.stem}: {run.reason}" + (f"; last good report kept: reports/{run.last_good_stem}.html, "
                                                      f"inputs hash {run.last_good.short_key}" if run.last_good else "")
                for run in self.catalog.failed_runs]


def previous_output(output: Path) -> Path | None:
    """``output`` when it holds an earlier build (it will be replaced), ``None`` when it is absent or empty."""
    if not output.exists():
        return None
    if output.is_dir() and (output / MARKER).is_file():
        return output
    if output.is_dir() and not any(output.iterdir()):
        return None
    raise OutputFolderError(f"{output} exists and is not a torchscan-report output folder (it has no {MARKER} "
                            "file); choose another --output or remove it")


def build(registry: Registry, options: BuildOptions, progress: Progress,
          executor_factory: ExecutorFactory = isolated_executor) -> BuildResult:
    output = options.output.resolve()
    previous = previous_output(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.build-", dir=output.parent))
    try:
        cache = ResultCache(previous, work, enabled=options.use_cache)
        progress.strict = {run.stem for run in registry.runs if options.strict or run.strict}
        results = run_all(registry.runs, registry.folder, cache, progress, jobs=options.jobs,
                          timeout=options.timeout, executor_factory=executor_factory)
        catalog = catalog_view(registry, results, options.strict)
        progress.note("rendering reports")
        charts = build_charts(catalog)
        documents = build_documents(catalog, charts, options.templates)
        progress.note("building the site")
        staged = work / "site"
        warnings = build_site(site_content(registry, catalog, documents, charts, options), registry.mkdocs, work,
                              staged)
        for relative, text in sorted(documents.items()):
            if relative.startswith("markdown/"):
                _write(staged / relative, text)
        _write(staged / CATALOG_INDEX, catalog_index(catalog))
        if (work / CACHE_FOLDER).is_dir():
            os.replace(work / CACHE_FOLDER, staged / CACHE_FOLDER)
        _write(staged / MARKER, "torchscan-report build output: this folder is replaced by the next build\n")
        _swap(staged, output, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return BuildResult(output=output, catalog=catalog, warnings=warnings)


def site_content(registry: Registry, catalog: CatalogView, documents: dict[str, str], charts: BuildCharts,
                 options: BuildOptions) -> SiteContent:
    """The catalog's pages: joined under ``models/`` to an existing site, or a standalone site with the catalog home."""
    content = SiteContent(title=registry.title, section=registry.section)
    for relative, text in documents.items():
        if relative.startswith("reports/"):
            content.files[relative] = text.encode("utf-8")
    content.catalog_page = "index.md" if registry.mkdocs is None else "models/catalog.md"
    content.pages.update(site_pages(catalog, content.catalog_page, charts, options.templates))
    content.model_pages = [(entry.name, f"models/{entry.name}.md") for entry in catalog.entries]
    return content


def _swap(staged: Path, output: Path, work: Path) -> None:
    if output.exists():
        os.replace(output, work / "previous")
    os.replace(staged, output)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
