"""``torchscan-report build``: analyze every registry run, write reports and Markdown, build the site, swap it in.

Everything is written to a temporary folder beside the output and renamed into place at the end, so an
interrupted or failed build leaves the previous output untouched. Only this (main) process writes files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .output.build_documents import Drawn, draw_build
from .output.render_cache import PAGES_FOLDER, RenderCache
from .registry.parsing import Registry
from .review.catalog_index import CATALOG_INDEX, catalog_index
from .review.catalog_view import CatalogView, catalog_view
from .review.wording import count_text, plural
from .runs.progress import Progress
from .runs.result_cache import CACHE_FOLDER, ResultCache, link_or_copy
from .runs.runner import ExecutorFactory, isolated_executor, run_all
from .site.mkdocs_site import SiteCaches, SiteContent, build_site
from .site.site_reuse import SiteReuse

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
    retry_failed: bool = False  # run again the runs whose cached result is a timeout


@dataclass
class BuildResult:
    output: Path
    catalog: CatalogView
    warnings: list[str] = field(default_factory=list)
    #: Wall seconds by phase: ``analysis`` (running or reusing results), ``rendering`` (drawing or reusing pages),
    #: ``mkdocs`` (MkDocs' own build) or, when the previous site was kept, ``site kept`` (checking and linking it:
    #: TorchScan's part), and ``writing`` (the remaining files and the swap).
    timings: dict[str, float] = field(default_factory=dict)

    def timing_line(self) -> str:
        """``TorchScan 3.1 s (analysis 2.0 s, rendering 0.9 s, writing 0.2 s), MkDocs 4.2 s`` (or ``not run``)."""
        ours = {phase: seconds for phase, seconds in self.timings.items() if phase != "mkdocs"}
        parts = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in ours.items())
        mkdocs = f"{self.timings['mkdocs']:.1f} s" if "mkdocs" in self.timings else "not run"
        return f"TorchScan {sum(ours.values()):.1f} s ({parts}), MkDocs {mkdocs}"

    @property
    def exit_code(self) -> int:
        return 1 if self.catalog.failed else 0

    def summary_line(self) -> str:
        """``11 runs: 8 complete, 2 partial, 1 failed; site at …``: a partial run is not counted as a success."""
        return f"{self.catalog.counts_text}; site at {self.output / 'index.html'}"

    def failure_lines(self) -> list[str]:
        """``FAILED stem: reason`` for every failed run, in registry order, naming its last good report if kept."""
        return [f"FAILED {run.stem}: {run.reason}" + (f"; last good report kept: reports/{run.last_good_stem}.html, "
                                                      f"inputs hash {run.last_good.short_key}" if run.last_good else "")
                for run in self.catalog.failed_runs]


def previous_output(output: Path) -> Path | None:
    """``output`` when it holds an earlier build (it will be replaced), ``None`` when it is absent or empty."""
    if output.is_dir() and (output / MARKER).is_file():
        return output
    if not output.exists() or (output.is_dir() and not any(output.iterdir())):
        return None
    raise OutputFolderError(f"{output} exists and is not a torchscan-report output folder (it has no {MARKER} "
                            "file); choose another --output or remove it")


def build(registry: Registry, options: BuildOptions, progress: Progress,
          executor_factory: ExecutorFactory = isolated_executor) -> BuildResult:
    output = options.output.resolve()
    previous = previous_output(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{output.name}.build-", dir=output.parent))
    clock, timings = Stopwatch(), dict[str, float]()
    try:
        cache = ResultCache(previous, work, enabled=options.use_cache, retry_failed=options.retry_failed)
        progress.strict = {run.stem for run in registry.runs if options.strict or run.strict}
        results = run_all(registry.runs, registry.folder, cache, progress, jobs=options.jobs,
                          timeout=options.timeout, executor_factory=executor_factory)
        catalog = catalog_view(registry, results, options.strict)
        timings["analysis"] = clock.lap()
        progress.note("rendering reports")
        drawn = draw_build(catalog, catalog_page(registry), options.strict, options.templates,
                           RenderCache(previous, work, enabled=options.use_cache), options.jobs)
        timings["rendering"] = clock.lap()
        progress.note(f"rendered {plural(len(catalog.entries), 'entry', 'entries')}: {count_text(drawn.drawn)} drawn, "
                      f"{count_text(drawn.reused)} reused from the render cache ({timings['rendering']:.1f} s)")
        staged = work / "site"
        warnings, kept = _site(site_content(registry, catalog, drawn), registry, previous, work, options.use_cache,
                               progress)
        timings["site kept" if kept else "mkdocs"] = clock.lap()
        for relative, text in drawn.files.items():
            if relative.startswith("markdown/"):
                _write_kept(previous, staged, relative, text)
        _write_kept(previous, staged, CATALOG_INDEX, catalog_index(catalog))
        if (work / CACHE_FOLDER).is_dir():
            os.replace(work / CACHE_FOLDER, staged / CACHE_FOLDER)
        _write(staged / MARKER, "torchscan-report build output: this folder is replaced by the next build\n")
        if output.exists():
            os.replace(output, work / "previous")
        os.replace(staged, output)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    timings["writing"] = clock.lap()
    result = BuildResult(output=output, catalog=catalog, warnings=warnings, timings=timings)
    progress.note(result.timing_line())
    return result


def _site(content: SiteContent, registry: Registry, previous: Path | None, work: Path, use_cache: bool,
          progress: Progress) -> tuple[list[str], bool]:
    """Build the site into ``work/site`` (or keep the previous one): MkDocs' warnings, and whether it was kept."""
    progress.note(f"building the site with MkDocs ({navigation_text(content)})")
    caches = SiteCaches(SiteReuse(previous, work, enabled=use_cache),
                        RenderCache(previous, work, enabled=use_cache, folder=PAGES_FOLDER))
    warnings = build_site(content, registry.mkdocs, work, work / "site", caches)
    progress.note(site_text(caches, len(content.model_pages)))
    return warnings, caches.site_reused


def catalog_page(registry: Registry) -> str:
    """Where the catalog page lies in the site: the home page of a standalone site, or beside an existing site's."""
    return "index.md" if registry.mkdocs is None else "models/catalog.md"


def site_content(registry: Registry, catalog: CatalogView, drawn: Drawn) -> SiteContent:
    """The catalog's pages: joined under ``models/`` to an existing site, or a standalone site with the catalog home."""
    files = {path: text.encode("utf-8") for path, text in drawn.files.items() if path.startswith("reports/")}
    return SiteContent(title=registry.title, section=registry.section, catalog_page=catalog_page(registry),
                       pages=dict(drawn.pages), files=files,
                       model_pages=[(entry.name, f"models/{entry.name}.md") for entry in catalog.entries])


def site_text(caches: SiteCaches, model_pages: int) -> str:
    """What MkDocs did, for the progress line: nothing (the site was kept), or how many pages it reused."""
    if caches.site_reused:
        return "site unchanged: kept the previous build's site files (MkDocs not run)"
    return f"MkDocs reused the conversion of {count_text(caches.pages_reused)} of {plural(model_pages, 'model page')}"


def navigation_text(content: SiteContent) -> str:
    """How the model pages are reached, for the progress line: from the navigation, or from the catalog only."""
    pages = plural(len(content.model_pages), "model page")
    return f"{pages} in the navigation" if content.model_pages_in_nav else f"{pages}, reached from the catalog"


class Stopwatch:
    """Seconds between successive laps (wall time, for the progress line and the benchmark)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def lap(self) -> float:
        now = time.perf_counter()
        elapsed, self.last = now - self.last, now
        return elapsed


def _write_kept(previous: Path | None, staged: Path, relative: str, text: str) -> None:
    """Write ``staged/relative``, or link the previous output's file when that has these bytes (`link_or_copy`)."""
    data = text.encode("utf-8")
    kept = previous / relative if previous is not None else None
    try:
        same = kept is not None and kept.is_file() and not kept.is_symlink() and kept.read_bytes() == data
    except OSError:
        same = False
    if not (same and kept is not None and link_or_copy(kept, staged / relative)):
        _write(staged / relative, text)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
