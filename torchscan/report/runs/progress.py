"""Build progress: a live rich progress bar on a terminal, one plain line per event otherwise (logs, CI)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Collection
from typing import Any, TextIO

from ...results import incomplete_metrics


def outcome_label(status: str, result: dict[str, Any] | None, strict: bool) -> str:
    """``status`` (``ok``, ``cached`` or a failure) refined by what the build will make of the run: ``partial`` (some
    number is a lower bound or unavailable), ``failed (strict: incomplete)``, or the failing layer when the forward of
    one raised, so that a progress line never says ``ok`` for a run the summary lists as failed."""
    error = (result or {}).get("error")
    if isinstance(error, dict) and error.get("layer") is not None:
        return f"{status}, failing layer {error['layer'] or '(root)'}"
    report = (result or {}).get("report")
    if not isinstance(report, dict) or "totals" not in report or not incomplete_metrics(report):
        return status
    if strict:
        return "failed (strict: incomplete)" if status == "ok" else f"{status}, failed (strict: incomplete)"
    return f"{status}, partial"


class Progress:
    """Plain lines: ``[3/14] resnet18: ok``."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total = 0
        self.done = 0
        self.started: dict[str, None] = {}
        #: Stems of the runs that must be complete (``--strict`` or ``strict = true``).
        self.strict: Collection[str] = ()

    def start(self, total: int) -> None:
        self.total, self.done = total, 0

    def submitted(self, stem: str) -> None:
        self.started[stem] = None

    def finished(self, stem: str, status: str, result: dict[str, Any] | None = None) -> None:
        self.done += 1
        self.started.pop(stem, None)
        self._show(stem, outcome_label(status, result, stem in self.strict))

    def _show(self, stem: str, label: str) -> None:
        self.note(f"[{self.done}/{self.total}] {stem}: {label}")

    def stop(self) -> None:
        pass

    def note(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


class RichProgress(Progress):
    """The same events drawn as a live progress bar with the runs in flight."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        self.console = Console(file=self.stream)
        self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       console=self.console, transient=True)
        self.task: Any = None

    def start(self, total: int) -> None:
        super().start(total)
        self.bar.start()
        self.task = self.bar.add_task("analyzing", total=total)

    def submitted(self, stem: str) -> None:
        super().submitted(stem)
        self._describe()

    def _show(self, stem: str, label: str) -> None:
        from rich.markup import escape

        style = "green" if label in ("ok", "cached") else "yellow" if label.endswith("partial") else "red"
        self.console.print(f"[{style}]{escape(label)}[/{style}] {escape(stem)}", highlight=False)
        self.bar.advance(self.task)
        self._describe()

    def stop(self) -> None:
        self.bar.stop()

    def note(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def _describe(self) -> None:
        running = ", ".join(sorted(self.started)[:3]) + (" …" if len(self.started) > 3 else "")
        self.bar.update(self.task, description=f"analyzing {running}" if running else "analyzing")


def make_progress(stream: TextIO | None = None) -> Progress:
    """Rich on a terminal (when rich is installed), plain lines otherwise."""
    stream = stream or sys.stderr
    if stream.isatty():
        with contextlib.suppress(ImportError):
            return RichProgress(stream)
    return Progress(stream)
