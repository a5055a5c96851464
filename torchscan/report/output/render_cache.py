"""The render cache: the files drawn from an entry (its reports, charts and pages) reused while their inputs stay.

An entry's files are a pure function of the entry's registry description, its runs' results (reports, errors,
last good reports), strictness, the templates, and the code and libraries that draw them. The key hashes all of
these: the results themselves (so a changed report is drawn again), the content of the built-in templates and of
a ``--templates`` folder, a digest of TorchScan's own source files (a development checkout changes without a new
version number), TorchScan's version and matplotlib's version. The catalog's files are keyed the same way by its
entries' keys, title, description and page location.

Entries are stored gzip-compressed under ``.torchscan-cache/render/`` of the output folder, beside the result
cache: read from the previous build, and the ones used again copied into the new output, so stale entries vanish
after one build. An entry that cannot be read, has another format, or names another key is ignored (drawn
again), never trusted.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import zlib
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from ... import __version__
from ..registry.parsing import Entry
from ..runs.result_cache import CACHE_FOLDER, link_or_copy
from .templates import PACKAGE_ROOT, template_folder

RENDER_FOLDER = "render"
#: Beside it, MkDocs' conversions of unchanged model pages (`torchscan.report.site.page_cache`).
PAGES_FOLDER = "pages"
#: Bumped when the stored layout changes, so entries of another layout are never read.
RENDER_FORMAT = 1


def folder_digest(folder: Path, pattern: str = "*") -> str:
    """SHA-256 over the relative paths and contents of the files under ``folder`` matching ``pattern``, in order."""
    digest = hashlib.sha256()
    for path in sorted(path for path in folder.rglob(pattern) if path.is_file() and "__pycache__" not in path.parts):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of TorchScan's Python sources: the views and charts that draw a page are code, not templates."""
    return folder_digest(PACKAGE_ROOT, "*.py")


def matplotlib_version() -> str | None:
    """matplotlib's version from package metadata (no import); ``None`` when it is not installed (no charts)."""
    try:
        return metadata.version("matplotlib")
    except metadata.PackageNotFoundError:
        return None


def drawing_context(templates: Path | None) -> str:
    """The key part shared by every entry of a build: templates, TorchScan's code and version, matplotlib's."""
    return content_hash({"format": RENDER_FORMAT, "templates": folder_digest(template_folder()),
                         "overrides": folder_digest(templates) if templates is not None else None,
                         "code": code_digest(), "torchscan": __version__, "matplotlib": matplotlib_version()})


def entry_key(context: str, entry: Entry, results: list[dict[str, Any]], strict: bool) -> str:
    """The key of an entry's files: the drawing context, the entry as the registry describes it, its results."""
    return content_hash({"context": context, "entry": dataclasses.asdict(entry), "results": results, "strict": strict})


def catalog_key(context: str, entry_keys: list[str], described: dict[str, Any]) -> str:
    """The key of the catalog's files: its entries' keys (in order) and what else the catalog page shows."""
    return content_hash({"context": context, "entries": entry_keys, "catalog": described})


def content_hash(payload: Any) -> str:
    """SHA-256 of a JSON-serializable payload (sorted keys; anything else by its ``str``)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class RenderCache:
    """Reads drawn files from the previous output folder and keeps the ones used (or newly drawn) in the new one."""

    def __init__(self, previous: Path | None, current: Path, enabled: bool = True, folder: str = RENDER_FOLDER
                 ) -> None:
        self.previous = previous / CACHE_FOLDER / folder if previous else None
        self.current = current / CACHE_FOLDER / folder
        self.enabled = enabled

    def load(self, key: str) -> dict[str, str] | None:
        """The files stored under ``key`` by the previous build (kept for the next one), or ``None``."""
        if not self.enabled or self.previous is None:
            return None
        try:
            data = (self.previous / f"{key}.json.gz").read_bytes()
            stored = json.loads(gzip.decompress(data))
        except (OSError, ValueError, EOFError, zlib.error):
            return None
        files = stored.get("files") if isinstance(stored, dict) else None
        if not _all_text(files) or stored.get("format") != RENDER_FORMAT or stored.get("key") != key:
            return None
        if not link_or_copy(self.previous / f"{key}.json.gz", self.current / f"{key}.json.gz"):
            self._write(key, data)
        return files

    def keep_all(self) -> None:
        """Carry every entry of the previous build into the new one (when the site they were used for is kept)."""
        if not self.enabled or self.previous is None or not self.previous.is_dir():
            return
        for stored in self.previous.glob("*.json.gz"):
            link_or_copy(stored, self.current / stored.name)

    def store(self, key: str, files: dict[str, str]) -> None:
        """Keep newly drawn files for the next build (compressed without a timestamp: the same bytes every time)."""
        payload = json.dumps({"format": RENDER_FORMAT, "key": key, "files": files}, sort_keys=True).encode()
        self._write(key, gzip.compress(payload, compresslevel=1, mtime=0))

    def _write(self, key: str, data: bytes) -> None:
        self.current.mkdir(parents=True, exist_ok=True)
        (self.current / f"{key}.json.gz").write_bytes(data)


def _all_text(files: Any) -> bool:
    return isinstance(files, dict) and all(isinstance(name, str) and isinstance(text, str)
                                           for name, text in files.items())
