"""View objects of a build: one summary per registry run and entry, and the catalog that lists them.

A run is *failed* when its analysis did not produce a report, or when strictness was asked for (``strict = true``
in the entry or ``--strict``) and the report is incomplete; the site then shows a failure notice for it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ...results import SUMMABLE_METRICS, incomplete_metrics, is_incomplete
from ...views import EMPTY, Cell, ReportView, metric_cell, parameter_cell, report_view, value_text, worst_status
from ...views.parallel import NO_PLAN
from ...views.sweep import SweepView, sweep_view
from ...views.timing import NO_TIME, time_view
from ...views.training import TrainingView
from ..registry.jobs import LAST_GOOD_SUFFIX, Run
from ..registry.parsing import Entry, Registry
from .sweep_record import failure_text, sweep_record
from .wording import count_text, plural

#: Run status -> the badge class the site colours it with.
STATUS_CLASSES = {"complete": "complete", "partial": "partial", "unavailable": "unavailable", "failed": "failed",
                  "incomplete (strict)": "failed"}
#: The training column's cell of a run that did not ask for its training step.
NO_TRAINING = Cell("—", "not_requested", "no training step requested (training = { ... } in models.toml)")
#: The memory columns' cell of a run whose report has no memory sections (an analysis that did not trace memory).
NO_MEMORY = Cell("—", "not_requested", "memory was not traced for this run")
#: How many hex digits of an inputs' hash the pages show (the full hash is in the cache and the page's hover text).
SHORT_HASH = 12


@dataclass
class LastGood:
    """A failed run's last good report, from an earlier build: the inputs' hash (cache key) it was built from."""

    key: str
    report: dict[str, Any]
    view: ReportView

    @property
    def short_key(self) -> str:
        return self.key[:SHORT_HASH]

    @property
    def notice(self) -> str:
        """The line that marks the report as not from this build."""
        return (f"From an earlier build (inputs hash {self.short_key}): the latest analysis of this run failed, so "
                "this is its last good report, kept until a new analysis succeeds.")


@dataclass
class RunSummary:
    run: Run
    result: dict[str, Any]
    strict: bool
    inputs: str
    params: Cell = EMPTY
    macs: Cell = EMPTY
    flops: Cell = EMPTY
    operator_flops: Cell = EMPTY
    dmas: Cell = EMPTY
    #: The whole training step's FLOPs (forward, loss, backward, optimizer).
    training_flops: Cell = NO_TRAINING
    #: The bytes created during the forward and live at its peak (parameters and buffers excluded).
    forward_peak: Cell = NO_MEMORY
    #: The activation count in fvcore's convention (a count, not bytes).
    activations: Cell = NO_MEMORY
    #: All live bytes at the training step's peak (parameters, gradients, optimizer state, saved activations): the
    #: steady state's (``totals.training_peak_bytes``), the optimizer state resident from the step's start.
    training_peak: Cell = NO_TRAINING
    #: `ParallelView.per_device_peak` and `SizingView.fits_on`; "—" without a sharded plan.
    per_device_peak: Cell = NO_PLAN
    fits_on: Cell = NO_PLAN
    #: The forward's roofline bound on the entry's ``hardware`` and its measured latency on the build machine
    #: (`torchscan.views.timing`); "—" cells where the entry asks for neither.
    bound: Cell = NO_TIME
    latency: Cell = NO_TIME
    training: TrainingView | None = None
    status: str = "failed"
    incomplete: list[str] = field(default_factory=list)
    view: ReportView | None = None
    last_good: LastGood | None = None

    @property
    def stem(self) -> str:
        return self.run.stem

    @property
    def label(self) -> str:
        """The variant's name, a sweep point's ``seq_len 1,024``, or the entry's name."""
        if self.run.size is not None:
            return f"{self.run.quantity} {self.run.size:,}"
        return self.run.variant or self.run.entry

    @property
    def last_good_stem(self) -> str:
        """The file stem of the run's last good report (written only when there is one)."""
        return self.stem + LAST_GOOD_SUFFIX

    @property
    def report(self) -> dict[str, Any] | None:
        return self.result.get("report")

    @property
    def error(self) -> dict[str, str] | None:
        return self.result.get("error")

    @property
    def strict_failed(self) -> bool:
        return self.report is not None and self.strict and bool(self.incomplete)

    @property
    def failed(self) -> bool:
        return self.report is None or self.strict_failed

    @property
    def outcome(self) -> str:
        """How the run counts in a build summary: ``complete``, ``partial`` (a lower bound or unavailable number
        somewhere) or ``failed`` (no report, or incomplete under strictness)."""
        if self.failed:
            return "failed"
        return "complete" if self.status == "complete" else "partial"

    @property
    def status_class(self) -> str:
        return STATUS_CLASSES.get(self.status, "partial")

    @property
    def failing_layer(self) -> str | None:
        """The path of the layer whose forward raised (``(root)`` for the model itself), when the failure has one."""
        layer = self.error.get("layer") if self.error else None
        return None if layer is None else layer or "(root)"

    @property
    def cause(self) -> str:
        """What went wrong, on one line (`failure_text`, or the strict check that failed); empty if nothing did."""
        if self.error:
            return failure_text(self.result)
        return self.notices[0] if self.notices else ""

    @property
    def reason(self) -> str:
        """Why the run failed, on one line, naming the failing layer when a layer's forward raised (as the progress
        lines do); empty for a run that did not fail."""
        layer = self.failing_layer
        return self.cause + (f" (failing layer {layer})" if layer is not None else "")

    @property
    def notices(self) -> list[str]:
        if not self.strict_failed:
            return []
        what = self.view.incomplete if self.view is not None and self.view.incomplete else ", ".join(self.incomplete)
        return [f"Strict check failed: {what}."]


@dataclass
class EntrySummary:
    entry: Entry
    runs: list[RunSummary]
    #: A swept entry's JSON (`torchscan.report.review.sweep_record.sweep_record`) and its view; None for other entries.
    sweep_json: dict[str, Any] | None = None
    sweep: SweepView | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def primary(self) -> RunSummary:
        """The run the entry's page and catalog row describe: a sweep's declared point, else the first run."""
        sweep = self.entry.sweep
        if sweep is None:
            return self.runs[0]
        return next(run for run in self.runs if run.run.size == sweep.default)

    @property
    def catalog_runs(self) -> list[RunSummary]:
        """The catalog's rows of this entry: every variant, or a sweep's declared point alone (its page has the
        other points)."""
        return [self.primary] if self.entry.sweep is not None else self.runs

    @property
    def sweep_label(self) -> str:
        """``seq_len 128 · sweep 128–1,024 (4 points)``: the declared point and the swept range of a catalog row."""
        sweep = self.entry.sweep
        return "" if sweep is None else f"{sweep.name} {sweep.default:,} · sweep {sweep.range_text}"

    @property
    def failed(self) -> bool:
        return any(run.failed for run in self.runs)

    @property
    def status(self) -> str:
        if any(run.report is None for run in self.runs):
            return "failed"
        if any(run.strict_failed for run in self.runs):
            return "incomplete (strict)"
        return worst_status([{"status": run.status} for run in self.runs])

    @property
    def status_class(self) -> str:
        return STATUS_CLASSES.get(self.status, "partial")


@dataclass
class CatalogView:
    title: str
    description: str
    entries: list[EntrySummary]

    @property
    def failed(self) -> list[EntrySummary]:
        return [entry for entry in self.entries if entry.failed]

    @property
    def has_training(self) -> bool:
        """Whether some run asked for its training step: only then does the site's catalog show the column."""
        return any(run.run.training is not None for run in self.runs)

    @property
    def has_parallel(self) -> bool:
        """Whether some run has a sharded plan: only then does the site's catalog show the per-device columns."""
        return any(run.per_device_peak is not NO_PLAN for run in self.runs)

    @property
    def has_time(self) -> bool:
        """Whether some run is bounded on a named device or measured: only then does the catalog show its Time
        column (the bound over the measured latency)."""
        return any(run.bound is not NO_TIME or run.latency is not NO_TIME for run in self.runs)

    @property
    def has_memory(self) -> bool:
        """Whether some run's report traced memory: only then does the site's catalog show the memory columns."""
        return any(run.forward_peak is not NO_MEMORY for run in self.runs)

    @property
    def tag_counts(self) -> dict[str, int]:
        """Each tag of the entries (the catalog's filter facets), alphabetically, with how many entries carry it."""
        counts = Counter(tag for entry in self.entries for tag in set(entry.entry.tags))
        return dict(sorted(counts.items()))

    @property
    def runs(self) -> list[RunSummary]:
        return [run for entry in self.entries for run in entry.runs]

    @property
    def failed_runs(self) -> list[RunSummary]:
        return [run for run in self.runs if run.failed]

    @property
    def counts(self) -> dict[str, int]:
        """Runs by outcome: complete, partial (some number a lower bound or unavailable) and failed."""
        outcomes = [run.outcome for run in self.runs]
        return {outcome: outcomes.count(outcome) for outcome in ("complete", "partial", "failed")}

    @property
    def counts_text(self) -> str:
        """``11 runs: 8 complete, 2 partial, 1 failed``."""
        counts = self.counts
        return f"{plural(sum(counts.values()), 'run')}: " + ", ".join(f"{count_text(number)} {name}"
                                                                    for name, number in counts.items())

    @property
    def models_text(self) -> str:
        """``1 model`` / ``12 models``: the catalog's entries."""
        return plural(len(self.entries), "model")


def summarize_run(run: Run, result: dict[str, Any], strict: bool) -> RunSummary:
    """Display cells for one run; a failed run keeps its error and empty cells."""
    report = result.get("report")
    summary = RunSummary(run=run, result=result, strict=strict or run.strict, inputs=spec_inputs(run, report))
    if report is None:
        summary.last_good = last_good(run, result.get("last_good"))
        return summary
    totals = report["totals"]
    summary.params = parameter_cell(totals["parameters"]["total"])
    summary.macs = metric_cell(totals["macs"])
    summary.flops = metric_cell(totals["module_flops"])
    summary.operator_flops = metric_cell(totals["operator_flops"])
    summary.dmas = metric_cell(totals["dmas"])
    if "training" in report:
        summary.training_flops = metric_cell(report["training"]["totals"]["step"])
    summarize_memory(summary, report)
    summary.status = worst_status([totals[name] for name in (*SUMMABLE_METRICS, "operator_flops")]
                                  + [report.get("training", {}).get("totals", {}).get("step")])
    summary.incomplete = incomplete_metrics(report) + incomplete_training(report)
    summary.view = report_view(report, title=run_title(run), description=run.description)
    summary.training = summary.view.training
    parallel = summary.view.parallel
    if parallel is not None:
        summary.per_device_peak = parallel.per_device_peak
        if parallel.sizing is not None:
            summary.fits_on = parallel.sizing.fits_on
    summary.view.time = time_view(report, run.hardware)
    if summary.view.time is not None:
        summary.bound, summary.latency = summary.view.time.bound, summary.view.time.latency
    summary.view.extra["notices"] = summary.notices
    if summary.strict_failed:
        summary.status = "incomplete (strict)"
    return summary


def summarize_memory(summary: RunSummary, report: dict[str, Any]) -> None:
    """The memory cells of a run whose report traced memory (the others keep their "—" cells)."""
    totals = report["totals"]
    if "forward_peak_bytes" in totals:
        summary.forward_peak = metric_cell(totals["forward_peak_bytes"])
        summary.activations = metric_cell(totals["activations"])
    training = report.get("training", {}).get("totals", {})
    if "training_peak_bytes" in training:
        summary.training_peak = metric_cell(training["training_peak_bytes"])
    elif "training" in report:
        summary.training_peak = Cell("—", "not_requested", "memory was not traced for this training step")


def incomplete_training(report: dict[str, Any]) -> list[str]:
    """The training step's incomplete totals (``training.totals.backward``): a strict entry fails on them too."""
    totals = report.get("training", {}).get("totals", {})
    return [f"training.totals.{name}" for name, result in totals.items() if is_incomplete(result)]


def run_title(run: Run) -> str:
    return run.entry + (f" ({run.variant})" if run.variant else "")


def last_good(run: Run, kept: dict[str, Any] | None) -> LastGood | None:
    """The view of a failed run's last good report (see `torchscan.report.runs.result_cache`), marked as from an earlier build."""
    if kept is None:
        return None
    view = report_view(kept["report"], title=run_title(run), description=run.description)
    result = LastGood(key=kept["key"], report=kept["report"], view=view)
    view.extra["notices"] = [result.notice]
    return result


def spec_inputs(run: Run, report: dict[str, Any] | None) -> str:
    """What the model was called with: the generated shapes, or the metadata of the provided call."""
    if report is not None:
        parts = [value_text(value) for value in report["inputs"]["args"]]
        parts += [f"{item['key']}={value_text(item['value'])}" for item in report["inputs"]["kwargs"]]
        return "; ".join(parts) or "no inputs"
    if run.inputs.shapes is not None:
        dtypes = run.inputs.dtypes or [""] * len(run.inputs.shapes)
        return "; ".join(f"{dtype}[1, {', '.join(map(str, shape))}]".lstrip()
                         for dtype, shape in zip(dtypes, run.inputs.shapes, strict=False))
    return f"{run.inputs.callable}({', '.join(f'{k}={v!r}' for k, v in sorted(run.inputs.kwargs.items()))})"


def catalog_view(registry: Registry, results: dict[str, dict[str, Any]], strict: bool) -> CatalogView:
    entries = [entry_summary(entry, results, strict) for entry in registry.entries]
    return CatalogView(title=registry.title, description=registry.description, entries=entries)


def entry_summary(entry: Entry, results: dict[str, dict[str, Any]], strict: bool) -> EntrySummary:
    """An entry's runs summarized; a swept entry also gets its sweep JSON (the curves fitted here) and its view."""
    summary = EntrySummary(entry, [summarize_run(run, results[run.stem], strict) for run in entry.runs])
    if entry.sweep is not None:
        summary.sweep_json = sweep_record(entry, results)
        summary.sweep = sweep_view(summary.sweep_json)
    return summary
