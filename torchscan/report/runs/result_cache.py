"""The result cache: a finished analysis is reused while nothing it depends on has changed.

The key hashes the run's own description, the source files that define its callables, and the torch and torchscan
versions. Successful analyses are stored, and runs that timed out, with the timeout they ran under: such a run costs
its whole timeout, so it is not run again while its key is the same, until a longer timeout or ``--retry-failed``
asks. Other failures are cheap to reproduce and may have been transient, so they are not stored. A failure never
costs an entry its last good result: the key of each run's last successful analysis is kept (``last-good.json``),
and that result is carried into the new cache and shown beside the failure until the next success replaces it.
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
from ..registry.callables import locate_module

CACHE_FOLDER = ".torchscan-cache"
#: Bumped when the stored layout changes, so stale entries are never read.
CACHE_FORMAT = 1
#: The cache's index of each run stem's last successful result: ``{stem: key}``.
LAST_GOOD_INDEX = "last-good.json"
#: Job keys that do not change a result: where the registry lies, the output name, where the run may be placed and
#: how long it may take (a run that timed out is run again under a longer timeout: `ResultCache.load`).
UNHASHED_JOB_KEYS = ("folder", "stem", "memory", "timeout")
#: The key of a stored timed-out result that holds the timeout it ran under (seconds).
TIMED_OUT_UNDER = "timed_out_under"


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


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_json(path: Path) -> Any:
    """The JSON value stored at ``path``, or ``None`` when it cannot be read or parsed."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


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
        sources[module] = file_digest(path) if path else None
    described = {key: value for key, value in job.items() if key not in UNHASHED_JOB_KEYS}
    payload = {"format": CACHE_FORMAT, "job": described, "sources": sources, "torch": torch_version,
               "torchscan": __version__}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class ResultCache:
    """Reads finished results from the previous output folder and writes them into the new one."""

    def __init__(self, previous: Path | None, current: Path, enabled: bool = True, retry_failed: bool = False) -> None:
        self.previous = previous / CACHE_FOLDER if previous else None
        self.current = current / CACHE_FOLDER
        self.enabled = enabled
        self.retry_failed = retry_failed
        #: Run stem -> the key of its last successful result, as written into the new cache.
        self.last_good: dict[str, str] = {}

    def load(self, key: str, timeout: float | None = None) -> dict[str, Any] | None:
        """The previous build's successful result under ``key``, or its timed-out one when that ran under a
        ``timeout`` at least as long and ``retry_failed`` is off (``None`` when absent or the cache is off)."""
        if not self.enabled:
            return None
        result = self._read(key, with_timeouts=not self.retry_failed)
        if result is None or result["status"] == "ok":
            return result
        under = result.pop(TIMED_OUT_UNDER, None)
        return result if isinstance(under, (int, float)) and timeout is not None and timeout <= under else None

    def store(self, key: str, result: dict[str, Any], stem: str, timeout: float | None = None) -> None:
        """Keep a successful result for the next build, as the last good result of ``stem``; or a run that timed out
        under ``timeout`` seconds (never as a last good result)."""
        if result.get("status") == "ok":
            record = result
        elif timed_out(result) and timeout is not None and self._previous_index().get(stem) != key:
            record = {**result, TIMED_OUT_UNDER: timeout}  # (a good result under the same key stays: --no-cache)
        else:
            return
        self.current.mkdir(parents=True, exist_ok=True)
        (self.current / f"{key}.json").write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
        if record is result:
            self.last_good[stem] = key

    def keep(self, key: str, result: dict[str, Any], stem: str, timeout: float | None = None) -> None:
        """Keep a result that `load` read from the previous build: its file is linked (`link_or_copy`), not written."""
        if self.previous is None or not link_or_copy(self.previous / f"{key}.json", self.current / f"{key}.json"):
            self.store(key, result, stem, timeout)
        elif result["status"] == "ok":
            self.last_good[stem] = key

    def close(self) -> None:
        """Write the index of each run's last good result (once, when every run is stored)."""
        if self.last_good:
            self.current.mkdir(parents=True, exist_ok=True)
            (self.current / LAST_GOOD_INDEX).write_text(json.dumps(self.last_good, sort_keys=True), encoding="utf-8")

    def carry_last_good(self, stem: str) -> tuple[str, dict[str, Any]] | None:
        """The previous build's last good result of a run that failed now, with its key, kept for the next build too
        (even ``--no-cache`` must not lose the only good one); ``None`` when the run never succeeded before."""
        key = self._previous_index().get(stem)
        result = self._read(key) if isinstance(key, str) else None
        if key is None or result is None:
            return None
        self.keep(key, result, stem)
        return key, result

    def _previous_index(self) -> dict[str, Any]:
        index = read_json(self.previous / LAST_GOOD_INDEX) if self.previous else None
        return index if isinstance(index, dict) else {}

    def _read(self, key: str, with_timeouts: bool = False) -> dict[str, Any] | None:
        """The stored successful result under ``key`` (or, ``with_timeouts``, a stored timeout too)."""
        result = read_json(self.previous / f"{key}.json") if self.previous else None
        if not isinstance(result, dict):
            return None
        return result if result.get("status") == "ok" or (with_timeouts and timed_out(result)) else None


def timed_out(result: dict[str, Any]) -> bool:
    """A failed result whose run was killed at its timeout."""
    error = result.get("error")
    return result.get("status") == "failed" and isinstance(error, dict) and error.get("stage") == "timeout"
