"""Synthetic catalogs for tests of the catalog page at scale, built without worker processes or drawn model pages:
a registry of N tagged entries, results from `crawl_module` on tiny models (every 50th entry failed), and a
standalone site of the catalog page with one-line model pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from torchscan import crawl_module
from torchscan.report.output.documents import SITE_PAGES, catalog_files
from torchscan.report.registry.parsing import Registry, load_registry
from torchscan.report.review.catalog_view import CatalogView, catalog_view
from torchscan.report.site.mkdocs_site import SiteContent, build_site

FAILED_EVERY = 50


def tags_of(index: int) -> list[str]:
    """Entry ``index``'s tags: ``narrow`` or ``wide``, and ``odd`` for every odd index."""
    return ["wide" if index % 4 == 0 else "narrow"] + (["odd"] if index % 2 else [])


def synthetic_registry(folder: Path, entries: int) -> Registry:
    """``entries`` entries named ``net-0000`` onwards (the factory is never called)."""
    folder.mkdir(parents=True, exist_ok=True)
    tables = [f'[[models]]\nname = "net-{index:04d}"\nfactory = "tiny:net"\nkwargs = {{ width = {2 + index} }}\n'
              f'input_shape = [4]\ntags = {tags_of(index)!r}\n'.replace("'", '"') for index in range(entries)]
    (folder / "models.toml").write_text(f'[catalog]\ntitle = "{entries} nets"\n\n' + "\n".join(tables),
                                        encoding="utf-8")
    return load_registry(folder / "models.toml")


def synthetic_results(registry: Registry) -> dict[str, dict[str, Any]]:
    """A report of a two-layer MLP of the entry's width per run; every `FAILED_EVERY`-th run failed instead."""
    results: dict[str, dict[str, Any]] = {}
    for index, run in enumerate(registry.runs):
        if index % FAILED_EVERY == FAILED_EVERY - 1:
            results[run.stem] = {"status": "failed", "error": {"stage": "forward", "type": "RuntimeError",
                                                               "message": "synthetic failure"}}
            continue
        width = run.kwargs["width"]
        report = crawl_module(nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2)), (4,))
        results[run.stem] = {"status": "ok", "report": report}
    return results


def synthetic_catalog(folder: Path, entries: int) -> CatalogView:
    registry = synthetic_registry(folder, entries)
    return catalog_view(registry, synthetic_results(registry), strict=False)


def catalog_site(folder: Path, entries: int) -> tuple[Path, list[str]]:
    """A standalone site of a synthetic catalog of ``entries`` entries (the model pages hold only their title):
    the built folder and MkDocs' warnings."""
    catalog = synthetic_catalog(folder, entries)
    content = SiteContent(title=catalog.title, section="Models")
    for path, text in catalog_files(catalog, content.catalog_page).items():
        if path.startswith(SITE_PAGES):
            content.pages[path[len(SITE_PAGES):]] = text
    for entry in catalog.entries:
        content.pages[f"models/{entry.name}.md"] = f"# {entry.name}\n"
        content.model_pages.append((entry.name, f"models/{entry.name}.md"))
    site = folder / "site"
    return site, build_site(content, None, folder / "work", site)
