"""MkDocs' work on unchanged model pages, reused: their Markdown conversion and their search entries.

Profiled on a catalog of 200 small models, MkDocs spends three quarters of its build converting the model pages'
Markdown (25 ms a page) and in Material's search plugin, which parses every page's HTML again (12 ms a page). Both
are pure functions of what they read, so this MkDocs plugin, added by TorchScan to its own builds, keeps their
results for the model pages, keyed by everything they read: a page's conversion by its final Markdown, its place,
the site's file list, the Markdown settings, the site's other source files and the installed packages; its search
entries by what the search plugin reads of the page and the search settings. Everything else runs as in an
uncached build, and the site is byte-identical to an uncached build's (tested). Entries live beside the render
cache (``.torchscan-cache/pages/``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection
from typing import Any

from mkdocs.plugins import BasePlugin, event_priority
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page
from mkdocs.structure.toc import AnchorLink, get_toc

from ..output.render_cache import RenderCache, content_hash

#: The key under which a page's cached state is stored (the render cache stores text by name).
STATE = "state.json"
#: MkDocs keeps the links to other pages' anchors only above DEBUG logging (see ``Page.render``).
_PAGES_LOG = logging.getLogger("mkdocs.structure.pages")


class PageCache(BasePlugin):
    """Reuses the conversion and search entries of the pages in ``cacheable`` (paths relative to ``docs_dir``).
    ``context`` is the caller's digest of what every page may read besides its own Markdown (the site's other
    source files, the installed packages); the plugin adds the Markdown settings and the site's file list."""

    def __init__(self, store: RenderCache, cacheable: Collection[str], context: str) -> None:
        super().__init__()
        self.store = store
        self.cacheable = frozenset(cacheable)
        self.context = context
        self.reused = 0

    def on_files(self, files: Files, *, config: Any) -> None:
        addresses = sorted((file.src_uri, file.dest_uri, file.url, str(file.inclusion)) for file in files)
        self.context = content_hash([self.context, addresses, markdown_settings(config)])

    def on_pre_build(self, *, config: Any) -> None:
        for plugin in config.plugins.values():
            _cache_search_entries(plugin, self)

    @event_priority(-100)  # after every other plugin's page_markdown: the Markdown as it will be converted
    def on_page_markdown(self, markdown: str, *, page: Page, config: Any, files: Files) -> str:
        if page.file.src_uri in self.cacheable:
            key = content_hash([self.context, page.file.src_uri, markdown])
            state = self.load(key)
            if state is None:
                page.render = _capturing(page, page.render, lambda captured: self.save(key, captured))  # type: ignore[method-assign, assignment]
            else:
                page.render = _restoring(page, state)  # type: ignore[method-assign, assignment]
                self.reused += 1
        return markdown

    def load(self, key: str) -> dict[str, Any] | None:
        files = self.store.load(key)
        return _decoded(files[STATE]) if files is not None and STATE in files else None

    def save(self, key: str, state: dict[str, Any]) -> None:
        self.store.store(key, {STATE: json.dumps(state)})  # unsorted: the search index keeps its entries' key order


def markdown_settings(config: Any) -> str:
    """The Markdown extensions and settings as stable text: an extension object by its class, the temporary
    ``docs_dir`` left out of paths (a setting without a stable text, a function's address, only costs misses)."""
    names = [name if isinstance(name, str) else f"{type(name).__module__}.{type(name).__qualname__}"
             for name in config["markdown_extensions"]]
    settings = {"extensions": names, "settings": config["mdx_configs"], "directory_urls": config["use_directory_urls"],
                "validation": config["validation"]}
    return json.dumps(settings, sort_keys=True, default=str).replace(config["docs_dir"], "<docs_dir>")


def _capturing(page: Page, render: Callable[[Any, Files], None], keep: Callable[[dict[str, Any]], None]
               ) -> Callable[[Any, Files], None]:
    """``Page.render`` that keeps what it produced (unless MkDocs ran at DEBUG level and skipped the anchors)."""
    def capture(config: Any, files: Files) -> None:
        render(config, files)
        if page.links_to_anchors is not None and page.content is not None:
            keep({"content": page.content, "toc": [_token(item) for item in page.toc],
                  "title": page._title_from_render, "anchors": sorted(page.present_anchor_ids or ()),
                  "links": {file.src_uri: links for file, links in page.links_to_anchors.items()}})
    return capture


def _restoring(page: Page, state: dict[str, Any]) -> Callable[[Any, Files], None]:
    """``Page.render`` that sets what an earlier ``Page.render`` of the same input produced."""
    def restore(config: Any, files: Files) -> None:
        page.content = state["content"]
        page.toc = get_toc(state["toc"])
        page._title_from_render = state["title"]
        page.present_anchor_ids = set(state["anchors"])
        if _PAGES_LOG.getEffectiveLevel() > logging.DEBUG:
            page.links_to_anchors = {files.src_uris[uri]: links for uri, links in state["links"].items()}
    return restore


def _token(item: AnchorLink) -> dict[str, Any]:
    """A table-of-contents entry as the token `get_toc` builds it from."""
    return {"level": item.level, "id": item.id, "name": item.title, "children": [_token(child) for child in
                                                                                item.children]}


def _cache_search_entries(plugin: Any, cache: PageCache) -> None:
    """Wrap Material's search index (no other) so that a cacheable page's entries are reused while it reads the same."""
    index = getattr(plugin, "search_index", None)
    add = getattr(index, "add_entry_from_context", None)
    entries = getattr(index, "entries", None)
    if index is None or add is None or not isinstance(entries, list) or type(index).__name__ != "SearchIndex":
        return
    settings = {name: value for name, value in index.config.items() if name != "enabled"}

    def add_entry(page: Page) -> None:
        if page.file.src_uri not in cache.cacheable:
            return add(page)
        key = content_hash([cache.context, settings, page.content, [_token(item) for item in page.toc], page.url,
                            str(page.title), page.meta])
        state = cache.load(key)
        if state is not None:
            entries.extend(state["entries"])
            return None
        start = len(entries)
        add(page)
        cache.save(key, {"entries": entries[start:]})
        return None

    index.add_entry_from_context = add_entry


def _decoded(text: str) -> dict[str, Any] | None:
    try:
        state = json.loads(text)
    except ValueError:
        return None
    return state if isinstance(state, dict) else None
