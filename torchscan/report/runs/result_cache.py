"""The result cache: a finished analysis is reused while nothing it depends on has changed.

The key hashes the run's own description (factory, keyword arguments, inputs, device, extension mappings), the
source files that define its factory, inputs callable, ``custom_modules`` and ``custom_mapping``, and the torch and
torchscan versions. Only successful analyses are stored: a failure is cheap to reproduce and may have been
transient (a timeout, a killed worker).

A failure never costs an entry its last good result: the cache also keeps, per run stem, the key of the last
successful analysis (``last-good.json``). When a run fails, that result is carried into the new cache and shown
beside the failure as a report from an earlier build; the next successful analysis of the run replaces it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from ... import __version__
from ..registry.callables import locate_module, source_digest

CACHE_FOLDER = ".torchscan-cache"
#: Bumped when the stored layout changes, so stale entries are never read.
CACHE_FORMAT = 1
#: The cache's index of each run stem's last successful result: ``{stem: key}``.
LAST_GOOD_INDEX = "last-good.json"
#: Job keys that do not change a result: where the registry lies, the output name, where the run may be placed.
UNHASHED_JOB_KEYS = ("folder", "stem", "memory")


def link_or_copy(source: Path, target: Path) -> bool:
    """Put ``source``'s bytes at ``target`` by a hard link, or a copy where links are not possible; ``False`` when
    ``source`` cannot be read. A file kept from the previous output is linked rather than written again: deleting
    the previous output then frees nothing of it (on some disks freeing blocks costs a millisecond a file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except FileExistsError:
        return True
    except OSError:
        try:
            shutil.copyfile(source, target)
        except OSError:
            return False
    return True


def installed_torch_version() -> str:
    """torch's version from package metadata: reading it does not import torch."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "unknown"


def cache_key(job: dict[str, Any], folder: Path, torch_version: str) -> str:
    """SHA-256 of everything the run's result depends on that the registry can see."""
    sources = {}
    targets = [job["factory"], job["inputs"].get("callable"), job.get("custom_modules"), job.get("custom_mapping")]
    for target in filter(None, targets):
        module = target.partition(":")[0]
        path = locate_module(module, folder)
        sources[module] = source_digest(path) if path else None
    described = {key: value for key, value in job.items() if key not in UNHASHED_JOB_KEYS}
    payload = {"format": CACHE_FORMAT, "job": described, "sources": sources, "torch": torch_version,
               "torchscan": __version__}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class ResultCache:
    """Reads finished results from the previous output folder and writes them into the new one."""

    def __init__(self, previous: Path | None, current: Path, enabled: bool = True) -> None:
        self.previous = previous / CACHE_FOLDER if previous else None
        self.current = current / CACHE_FOLDER
        self.enabled = enabled
        #: Run stem -> the key of its last successful result, as written into the new cache.
        self.last_good: dict[str, str] = {}

    def load(self, key: str) -> dict[str, Any] | None:
        """The previous build's successful result under ``key`` (``None`` when absent or the cache is off)."""
        return self._read(key) if self.enabled else None

    def store(self, key: str, result: dict[str, Any], stem: str) -> None:
        """Keep a successful result for the next build, as the last good result of ``stem``."""
        if result.get("status") != "ok":
            return
        self.current.mkdir(parents=True, exist_ok=True)
        (self.current / f"{key}.json").write_text(json.dumps(result, sort_keys=True), encoding="utf-8")
        self.last_good[stem] = key

    def keep(self, key: str, result: dict[str, Any], stem: str) -> None:
        """Keep a result that `load` read from the previous build: its file is hard-linked (a copy where links are
        not possible), not written again, so that deleting the previous output frees nothing of it."""
        if self.previous is None or not link_or_copy(self.previous / f"{key}.json", self.current / f"{key}.json"):
            self.store(key, result, stem)
            return
        self.last_good[stem] = key

    def close(self) -> None:
        """Write the index of each run's last good result (once, when every run is stored)."""
        if self.last_good:
            self.current.mkdir(parents=True, exist_ok=True)
            (self.current / LAST_GOOD_INDEX).write_text(json.dumps(self.last_good, sort_keys=True), encoding="utf-8")

    def carry_last_good(self, stem: str) -> tuple[str, dict[str, Any]] | None:
        """The previous build's last good result of a run that failed now, kept for the next build too, with
        its key; ``None`` when the run never succeeded before. Done even with the cache off: ``--no-cache``
        does not reuse results, but it must not lose the only good one."""
        key = self._previous_index().get(stem)
        result = self._read(key) if isinstance(key, str) else None
        if key is None or result is None:
            return None
        self.keep(key, result, stem)
        return key, result

    def _previous_index(self) -> dict[str, Any]:
        try:
            index = json.loads((self.previous / LAST_GOOD_INDEX).read_text(encoding="utf-8")) if self.previous else {}
        except (OSError, ValueError):
            return {}
        return index if isinstance(index, dict) else {}

    def _read(self, key: str) -> dict[str, Any] | None:
        if self.previous is None:
            return None
        try:
            result = json.loads((self.previous / f"{key}.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return result if isinstance(result, dict) and result.get("status") == "ok" else None
