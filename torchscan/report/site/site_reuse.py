"""The previous build's site, kept when nothing it is built from changed: MkDocs is then not run at all.

MkDocs rebuilds every page of a site on every run (10 s for a catalog of 200 small models). A site is a function
of its inputs: the assembled ``docs`` folder, the MkDocs configuration, the files a configuration names (hooks, a
theme's ``custom_dir``), TorchScan's own sources (the API page is drawn from its docstrings) and the installed
packages. Their digest is recorded with a manifest of the built site's files (path and SHA-256 of each) under
``.torchscan-cache/site.json``. When the next build's digest is the same and every file of the manifest is still
in the previous output with its recorded digest, those files are linked into the new output instead of running
MkDocs; anything else builds the site with MkDocs. Files a plugin reads from outside these inputs are not seen:
``--no-cache`` forces a full build.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from ..output.render_cache import code_digest, content_hash
from ..runs.result_cache import CACHE_FOLDER, file_digest, link_or_copy, read_json

MANIFEST = "site.json"
#: Bumped when the manifest's layout changes, so another layout is never trusted.
MANIFEST_FORMAT = 1


@lru_cache(maxsize=1)
def environment_digest() -> str:
    """A digest of every installed distribution's name and version (MkDocs, its theme, plugins and extensions)."""
    installed = sorted({(dist.metadata["Name"] or "", dist.version) for dist in metadata.distributions()})
    return content_hash({"installed": installed, "torchscan_code": code_digest()})


def tree_digest(folder: Path, skip: frozenset[str] = frozenset()) -> str:
    """SHA-256 over the relative paths and contents of the files under ``folder`` (but the ``skip`` paths)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if path.is_file() and relative not in skip:
            digest.update(relative.encode() + b"\0" + file_digest(path).encode() + b"\0")
    return digest.hexdigest()


def sources_digest(paths: list[Path]) -> str:
    """A digest of files and folders a configuration names (absent ones count as absent)."""
    parts: list[list[Any]] = []
    for path in paths:
        if path.is_dir():
            parts.append([str(path), tree_digest(path)])
        else:
            parts.append([str(path), file_digest(path) if path.is_file() else None])
    return content_hash(parts)


def site_inputs(docs: Path, config_text: str, overrides: dict[str, Any], sources: list[Path], work: Path) -> str:
    """The digest of everything the site is built from; the build's temporary folder is left out of paths."""
    settings = (config_text + json.dumps(overrides, sort_keys=True, default=str)).replace(str(work), "<work>")
    return content_hash({"docs": tree_digest(docs), "settings": settings, "sources": sources_digest(sources),
                         "environment": environment_digest()})


class SiteReuse:
    """Keeps the previous output's site when its inputs are unchanged and its files intact; records the new one."""

    def __init__(self, previous: Path | None, current: Path, enabled: bool = True) -> None:
        self.previous = previous
        self.manifest = current / CACHE_FOLDER / MANIFEST
        self.enabled = enabled

    def reuse(self, inputs: str, site_dir: Path) -> list[str] | None:
        """Link the previous site's files into ``site_dir`` and return its warnings; ``None`` (none linked) if stale."""
        recorded = self._previous_manifest() if self.enabled else None
        if recorded is None or recorded.get("inputs") != inputs:
            return None
        files: dict[str, str] = recorded["files"]
        assert self.previous is not None
        if not all(_intact(self.previous / relative, digest) for relative, digest in files.items()):
            return None
        if not all(link_or_copy(self.previous / relative, site_dir / relative) for relative in files):
            shutil.rmtree(site_dir, ignore_errors=True)  # a file vanished meanwhile: MkDocs builds it all
            return None
        self._write(recorded)
        return list(recorded["warnings"])

    def record(self, inputs: str, site_dir: Path, warnings: list[str]) -> None:
        """Write the manifest of the site MkDocs just built into ``site_dir``."""
        files = {path.relative_to(site_dir).as_posix(): file_digest(path)
                 for path in sorted(site_dir.rglob("*")) if path.is_file()}
        self._write({"format": MANIFEST_FORMAT, "inputs": inputs, "warnings": warnings, "files": files})

    def _previous_manifest(self) -> dict[str, Any] | None:
        recorded: Any = read_json(self.previous / CACHE_FOLDER / MANIFEST) if self.previous else None
        valid = (isinstance(recorded, dict) and recorded.get("format") == MANIFEST_FORMAT
                 and isinstance(recorded.get("files"), dict) and isinstance(recorded.get("warnings"), list))
        return recorded if valid and all(map(_inside, recorded["files"])) else None

    def _write(self, manifest: dict[str, Any]) -> None:
        self.manifest.parent.mkdir(parents=True, exist_ok=True)
        self.manifest.write_text(json.dumps(manifest, sort_keys=True), encoding="utf-8")


def _inside(relative: Any) -> bool:
    """Whether a manifest's path names a file inside the output folder (never an absolute path or ``..``)."""
    return isinstance(relative, str) and not Path(relative).is_absolute() and ".." not in Path(relative).parts


def _intact(path: Path, digest: Any) -> bool:
    return path.is_file() and not path.is_symlink() and file_digest(path) == digest
