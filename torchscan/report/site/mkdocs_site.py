"""MkDocs assembly and build: the catalog's pages joined to an existing site, or a standalone Material site.

The generated site always uses ``use_directory_urls: false`` (it works from disk), is built with ``strict``, and
gets a fixed ``SOURCE_DATE_EPOCH`` unless one is set, so two builds give the same bytes. MkDocs empties its
``site_dir`` before building, so callers build first and add other files afterwards.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ...schema import SCHEMA_FILE
from ..output.render_cache import RenderCache, content_hash
from ..output.templates import template_folder
from .site_reuse import SiteReuse, environment_digest, site_inputs, tree_digest

ASSET_FOLDER = "assets/torchscan"
#: The site's style sheets and scripts: (folder under templates/, file name), loaded by every page.
ASSETS = (("assets", "tree.css"), ("site_assets", "site.css"), ("site_assets", "tablesort.js"), ("assets", "tree.js"),
          ("site_assets", "catalog.js"))
STYLESHEETS = [f"{ASSET_FOLDER}/{name}" for _, name in ASSETS if name.endswith(".css")]
SCRIPTS = [f"{ASSET_FOLDER}/{name}" for _, name in ASSETS if name.endswith(".js")]
#: Up to this many model pages are listed in the global navigation. Material writes the whole navigation into
#: every page, so with more the site's size and build time grow with the square of the catalog: the pages are then
#: left out of the navigation (MkDocs is told so, ``not_in_nav``) and the catalog page is their index.
NAV_MODEL_PAGES = 50
#: The ``not_in_nav`` pattern (gitignore style, relative to ``docs_dir``) of the model pages.
MODEL_PAGES_PATTERN = "/models/*.md"
REQUIRED_EXTENSIONS = ("tables", "attr_list", "toc")
METHODOLOGY_FOLDER = "methodology"
#: Used when the caller has not set SOURCE_DATE_EPOCH: 2024-01-01T00:00:00Z, any fixed value works.
DEFAULT_SOURCE_DATE_EPOCH = "1704067200"
#: The name under which TorchScan adds its page cache to MkDocs' plugins.
PAGE_CACHE_PLUGIN = "torchscan/page-cache"


class SiteBuildError(RuntimeError):
    """MkDocs refused to build (a configuration error, or a warning under ``strict``)."""


@dataclass
class SiteContent:
    """What the catalog adds to a site: pages and files by path relative to ``docs_dir``, and its nav section."""

    title: str
    section: str
    pages: dict[str, str] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    catalog_page: str = "index.md"
    model_pages: list[tuple[str, str]] = field(default_factory=list)

    @property
    def model_pages_in_nav(self) -> bool:
        """Whether the model pages are listed in the global navigation: only up to `NAV_MODEL_PAGES` of them."""
        return len(self.model_pages) <= NAV_MODEL_PAGES


API_OPTIONS = {"show_root_heading": True, "show_root_full_path": True, "show_source": False,
               "separate_signature": True, "show_signature_annotations": True, "members_order": "source",
               "heading_level": 3}


def methodology_source() -> Path | None:
    """The documentation pages shipped with the package (``torchscan/docs``), or the checkout's ``docs/``."""
    packaged = resources.files("torchscan") / "docs"
    if packaged.is_dir():
        return Path(str(packaged))
    root = Path(__file__).resolve().parents[3]
    checkout = root / "docs"
    is_checkout = (root / "pyproject.toml").is_file() and 'name = "torchscan"' in (root / "pyproject.toml").read_text()
    return checkout if is_checkout and any(checkout.glob("*.md")) else None


@dataclass
class SiteCaches:
    """What a build may reuse from the previous output: the whole site when none of its inputs changed
    (`SiteReuse`), else MkDocs' work on the unchanged model pages (`PageCache`, stored in ``pages``)."""

    site: SiteReuse
    pages: RenderCache
    #: Set by `build_site`: whether the previous site was kept, and how many model pages MkDocs reused.
    site_reused: bool = False
    pages_reused: int = 0


@dataclass
class _Assembled:
    """The assembled ``docs`` folder's MkDocs configuration: its file, the overrides, the files it names."""

    config_file: Path
    overrides: dict[str, Any]
    sources: list[Path]


def build_site(content: SiteContent, mkdocs_file: Path | None, work: Path, site_dir: Path,
               caches: SiteCaches | None = None) -> list[str]:
    """Assemble ``work/docs`` and build it into ``site_dir``; returns MkDocs' warnings (empty on a clean build).
    With ``caches``, the previous site is kept when nothing it is built from changed, and unchanged model pages
    reuse their earlier conversion; either way ``site_dir`` gets the bytes of a full build."""
    from .page_cache import PageCache

    docs = work / "docs"
    assembled = _assemble(content, mkdocs_file, work, docs)
    assembled.overrides.update(docs_dir=str(docs), site_dir=str(site_dir), use_directory_urls=False, strict=True)
    if caches is None:
        return _run_mkdocs(assembled.config_file, assembled.overrides)
    inputs = site_inputs(docs, assembled.config_file.read_text(encoding="utf-8"), assembled.overrides,
                         assembled.sources, work)
    kept = caches.site.reuse(inputs, site_dir)
    caches.site_reused = kept is not None
    if kept is not None:
        caches.pages.keep_all()  # still valid: the next build with a changed entry needs them
        return kept
    generated = frozenset(content.pages) | frozenset(content.files)
    plugin = PageCache(caches.pages, [page for _, page in content.model_pages],
                       content_hash([environment_digest(), tree_digest(docs, generated)]))
    warnings = _run_mkdocs(assembled.config_file, assembled.overrides, plugin)
    caches.pages_reused = plugin.reused
    caches.site.record(inputs, site_dir, warnings)
    return warnings


def _assemble(content: SiteContent, mkdocs_file: Path | None, work: Path, docs: Path) -> _Assembled:
    """Write ``docs`` (the user's pages, the methodology pages, the catalog's) and the configuration to build it."""
    if docs.exists():
        shutil.rmtree(docs)
    if mkdocs_file is None:
        docs.mkdir(parents=True)
        methodology = _add_methodology(docs, None)
        config_file = work / "mkdocs.yml"
        config = _standalone_config(content, methodology, docs)
        config_file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        assembled = _Assembled(config_file, {}, [Path(hook) for hook in config["hooks"]])
    else:
        assembled = _joined(content, mkdocs_file, docs)
    _write_content(docs, content)
    return assembled


def _joined(content: SiteContent, mkdocs_file: Path, docs: Path) -> _Assembled:
    """The user's site with the catalog's section added: their configuration, overridden where needed."""
    from mkdocs.config import load_config

    with _captured_logs() as messages:
        user = load_config(str(mkdocs_file))
    if messages:
        raise SiteBuildError("; ".join(messages))
    user_docs = Path(user["docs_dir"])
    shutil.copytree(user_docs, docs, ignore=shutil.ignore_patterns(".*"))
    overrides: dict[str, Any] = {"markdown_extensions": _extensions(user),
                                 "extra_css": [*user["extra_css"], *STYLESHEETS],
                                 "extra_javascript": [*map(str, user["extra_javascript"]), *SCRIPTS]}
    methodology = _add_methodology(docs, user_docs)
    own_nav = user["nav"] if user["nav"] is not None else folder_nav(user_docs, user_docs)
    overrides["nav"] = [*own_nav, *_catalog_nav(content, methodology)]
    overrides["not_in_nav"] = not_in_nav(content, user["not_in_nav"])
    custom = user["theme"].custom_dir
    sources = [mkdocs_file.resolve(), *map(Path, user["hooks"]), *([Path(custom)] if custom else [])]
    return _Assembled(mkdocs_file, overrides, sources)


def _run_mkdocs(config_file: Path, overrides: dict[str, Any], plugin: Any = None) -> list[str]:
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import MkDocsException

    with _fixed_build_date(), _captured_logs() as messages:
        try:
            config = load_config(str(config_file), **overrides)
            config.plugins.on_startup(command="build", dirty=False)
            if plugin is not None:
                config.plugins[PAGE_CACHE_PLUGIN] = plugin
            try:
                build(config)
            finally:
                config.plugins.on_shutdown()
        except (MkDocsException, SystemExit) as error:
            raise SiteBuildError("; ".join([*messages, str(error)])) from None
    return messages


def _extensions(user: Any) -> list[Any]:
    names = list(dict.fromkeys([*user["markdown_extensions"], *REQUIRED_EXTENSIONS]))
    configs = user["mdx_configs"]
    return [{name: configs[name]} if name in configs else name for name in names]


def theme_safe(text: str) -> str:
    """The site name for the theme, which inserts it unescaped in places: markup characters become lookalikes."""
    return text.translate(str.maketrans('<>"&', "‹›”＆"))


def _standalone_config(content: SiteContent, methodology: list[str], docs: Path) -> dict[str, Any]:
    """A Material site with the catalog as home page; the shipped pages keep their snippets and hooks working."""
    source = methodology_source()
    hooks = [str(source / "hooks.py")] if methodology and source and (source / "hooks.py").is_file() else []
    snippets = {"base_path": [str(docs / METHODOLOGY_FOLDER), str(docs)], "check_paths": True}
    return {
        "site_name": theme_safe(content.title),
        # font: false keeps the pages offline (no Google Fonts request); the system font stack is used.
        "theme": {"name": "material", "features": ["content.code.copy", "navigation.top"], "font": False,
                  "palette": [
                      {"media": "(prefers-color-scheme: light)", "scheme": "default",
                       "toggle": {"icon": "material/weather-night", "name": "Switch to dark mode"}},
                      {"media": "(prefers-color-scheme: dark)", "scheme": "slate",
                       "toggle": {"icon": "material/weather-sunny", "name": "Switch to light mode"}}]},
        "markdown_extensions": ["tables", "attr_list", "admonition", "md_in_html", {"toc": {"permalink": True}},
                                {"pymdownx.snippets": snippets}, "pymdownx.highlight", "pymdownx.inlinehilite",
                                "pymdownx.superfences", "pymdownx.details"],
        "hooks": hooks,
        # The shipped API reference page is rendered from the installed package's docstrings.
        "plugins": ["search", {"mkdocstrings": {"handlers": {"python": {"options": API_OPTIONS}}}}],
        # The shipped methodology pages may link to pages of the project's own site that a catalog does not carry;
        # such links are reported, not fatal. The catalog's own links are checked by the test suite.
        "validation": {"links": {"not_found": "info", "unrecognized_links": "info", "anchors": "info"}},
        "extra_css": STYLESHEETS,
        "extra_javascript": SCRIPTS,
        "nav": [{"Catalog": content.catalog_page}, *_catalog_nav(content, methodology, standalone=True)],
        "exclude_docs": f"{METHODOLOGY_FOLDER}/conventions/\n",
        "not_in_nav": not_in_nav(content, None),
    }


def not_in_nav(content: SiteContent, user: Any) -> str:
    """The ``not_in_nav`` patterns: the user's, and the model pages when they are left out of the navigation (so
    that MkDocs does not report them as omitted, which a strict site may turn into a warning)."""
    patterns = [pattern.pattern for pattern in user.patterns] if user is not None else []
    if not content.model_pages_in_nav:
        patterns.append(MODEL_PAGES_PATTERN)
    return "".join(f"{pattern}\n" for pattern in patterns)


def _catalog_nav(content: SiteContent, methodology: list[str], standalone: bool = False) -> list[dict[str, Any]]:
    """The catalog's navigation section: the catalog page and, while there are few, the model pages."""
    section: list[Any] = [] if standalone else [{"Catalog": content.catalog_page}]
    if content.model_pages_in_nav:
        section += [{title: page} for title, page in content.model_pages]
    nav: list[dict[str, Any]] = [{"Models" if standalone else content.section: section}] if section else []
    if methodology:
        nav.append({"Methodology": methodology})
    return nav


def folder_nav(folder: Path, docs: Path) -> list[Any]:
    """The navigation MkDocs would make of a folder: ``index.md`` first, then pages, then sub-folders as sections."""
    pages = sorted((path for path in folder.glob("*.md")), key=lambda path: (path.name != "index.md", path.name))
    nav: list[Any] = [path.relative_to(docs).as_posix() for path in pages]
    for sub in sorted(path for path in folder.iterdir() if path.is_dir() and not path.name.startswith(".")):
        inner = folder_nav(sub, docs)
        if inner:
            nav.append({sub.name.replace("-", " ").replace("_", " ").capitalize(): inner})
    return nav


def _add_methodology(docs: Path, user_docs: Path | None) -> list[str]:
    """Copy the packaged methodology pages under ``methodology/`` (unless the site already is those pages)."""
    source = methodology_source()
    if source is None or (user_docs is not None and source.resolve() == user_docs.resolve()):
        return []
    target = docs / METHODOLOGY_FOLDER
    # The conventions/ files are included into conventions.md by snippets rather than shown as pages of their own.
    shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".*", "__pycache__", "*.py"))
    # schema.md links to the JSON Schema beside it: publish the shipped file in the same folder.
    (target / SCHEMA_FILE).write_bytes(resources.files("torchscan").joinpath(SCHEMA_FILE).read_bytes())
    pages = sorted(path.relative_to(docs).as_posix() for path in target.glob("*.md"))
    index = f"{METHODOLOGY_FOLDER}/index.md"
    return ([index] if index in pages else []) + [page for page in pages if page != index]


def _write_content(docs: Path, content: SiteContent) -> None:
    for relative, text in sorted(content.pages.items()):
        _write(docs / relative, text.encode("utf-8"))
    for relative, data in sorted(content.files.items()):
        _write(docs / relative, data)
    for folder, name in ASSETS:
        _write(docs / ASSET_FOLDER / name, (template_folder() / folder / name).read_bytes())


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


@contextmanager
def _fixed_build_date() -> Iterator[None]:
    previous = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = previous or DEFAULT_SOURCE_DATE_EPOCH
    try:
        yield
    finally:
        if previous is None:
            del os.environ["SOURCE_DATE_EPOCH"]


class _Collector(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.levelname}: {record.getMessage()}")


@contextmanager
def _captured_logs() -> Iterator[list[str]]:
    """MkDocs' warnings and errors, collected instead of printed (the caller decides how to show them)."""
    logger = logging.getLogger("mkdocs")
    collector = _Collector()
    logger.addHandler(collector)
    try:
        yield collector.messages
    finally:
        logger.removeHandler(collector)
