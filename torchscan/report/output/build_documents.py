"""What a build draws, drawn once: every entry's files and the catalog's, reused from the render cache when their
inputs are unchanged, the rest spread over ``--jobs`` processes.

matplotlib drawing is CPU-bound and holds the GIL, so the entries to draw go to a process pool (forked on Linux,
where a child starts at once with everything imported; spawned elsewhere). A child summarizes the entry again from
the same registry entry and results with the catalog's own `entry_summary`, and the drawing is deterministic (fixed
matplotlib settings, ids derived from content), so the files are the same bytes whichever process drew them. The
catalog is drawn in this process meanwhile.
"""

from __future__ import annotations

import functools
import multiprocessing
import sys
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..registry.parsing import Entry
from ..review.catalog_view import CatalogView, EntrySummary, entry_summary
from .documents import SITE_PAGES, catalog_files, entry_files
from .render_cache import RenderCache, catalog_key, drawing_context, entry_key

#: Fewer entries to draw than this are drawn in this process: starting a pool would cost more than it saves.
POOL_MINIMUM = 4


@dataclass
class Drawn:
    """The drawn files, by path relative to the output folder (``files``) or to the site's ``docs_dir``
    (``pages``), and how many entries were drawn now or reused from the render cache."""

    files: dict[str, str]
    pages: dict[str, str]
    drawn: int
    reused: int

    def add(self, files: dict[str, str]) -> None:
        for path, text in files.items():
            if path.startswith(SITE_PAGES):
                self.pages[path[len(SITE_PAGES):]] = text
            else:
                self.files[path] = text


def draw_entry(entry: Entry, results: dict[str, dict[str, Any]], strict: bool, templates: Path | None
               ) -> dict[str, str]:
    """One entry's files from its registry entry and its runs' results by stem (in a child process)."""
    return entry_files(entry_summary(entry, results, strict), templates)


def draw_build(catalog: CatalogView, catalog_page: str, strict: bool, templates: Path | None, cache: RenderCache,
               jobs: int) -> Drawn:
    """Every entry's files and the catalog's: reused from ``cache`` or drawn (and stored in it for the next build)."""
    context = drawing_context(templates)
    drawn = Drawn(files={}, pages={}, drawn=0, reused=0)
    keys = [entry_key(context, entry.entry, [run.result for run in entry.runs], strict) for entry in catalog.entries]
    missing = _reuse(cache, keys, catalog.entries, drawn)
    described = {"title": catalog.title, "description": catalog.description, "page": catalog_page, "strict": strict}
    with _pool(jobs, len(missing)) as pool:
        pending = _draw_entries(pool, [entry for _, entry in missing], strict, templates, jobs)
        drawn.add(_catalog(cache, catalog_key(context, keys, described), catalog, catalog_page, templates))
        for (key, _), files in zip(missing, pending, strict=True):
            cache.store(key, files)
            drawn.add(files)
            drawn.drawn += 1
    drawn.files, drawn.pages = dict(sorted(drawn.files.items())), dict(sorted(drawn.pages.items()))
    return drawn


def _reuse(cache: RenderCache, keys: list[str], entries: list[EntrySummary], drawn: Drawn
           ) -> list[tuple[str, EntrySummary]]:
    """Add the cached entries' files to ``drawn``; returns the entries still to draw, with their keys."""
    missing = []
    for key, entry in zip(keys, entries, strict=True):
        files = cache.load(key)
        if files is None:
            missing.append((key, entry))
        else:
            drawn.add(files)
            drawn.reused += 1
    return missing


def _pool(jobs: int, tasks: int) -> AbstractContextManager[ProcessPoolExecutor | None]:
    """A pool of ``min(jobs, tasks)`` processes, or none when there is too little to draw or one job."""
    workers = min(jobs, tasks)
    if workers < 2 or tasks < POOL_MINIMUM:
        return nullcontext(None)
    method = "fork" if sys.platform.startswith("linux") else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method))


def _draw_entries(pool: ProcessPoolExecutor | None, entries: list[EntrySummary], strict: bool,
                  templates: Path | None, jobs: int) -> Iterator[dict[str, str]]:
    """The entries' files in order: submitted to the pool at once, or drawn here one by one as they are read."""
    if pool is None:
        return (entry_files(entry, templates) for entry in entries)
    results = [{run.stem: run.result for run in entry.runs} for entry in entries]
    return pool.map(functools.partial(draw_entry, strict=strict, templates=templates), [e.entry for e in entries],
                    results, chunksize=max(1, len(entries) // (jobs * 4)))


def _catalog(cache: RenderCache, key: str, catalog: CatalogView, catalog_page: str, templates: Path | None
             ) -> dict[str, str]:
    files = cache.load(key)
    if files is None:
        files = catalog_files(catalog, catalog_page, templates)
        cache.store(key, files)
    return files
