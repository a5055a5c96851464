"""The ``torchscan-report`` command line: build, render, diff and check.

Exit codes: 0 success; 1 some entries failed (build: the site is still built; check: a callable cannot be found;
diff: a --fail-if budget is exceeded or cannot be checked, in a catalog diff for any entry, the review is still
written); 2 a registry or usage error (nothing written); 3 diff --require-same-model on reports (or catalog
entries) of two different models (the review is written).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .. import __version__
from .registry.parsing import Registry, RegistryError, load_registry, read_registry
from .review.wording import plural
from .runs.runner import ISOLATION_MODES, default_jobs

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_DIFFERENT_MODELS = 0, 1, 2, 3
SCHEDULER_VARIABLE = "TORCHSCAN_SCHEDULER"


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="torchscan-report", description="Cost reports and model-zoo catalog sites "
                                   "for PyTorch models, from a models.toml registry.")
    main.add_argument("--version", action="version", version=f"torchscan-report {__version__}")
    commands = main.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                   help="build, render, diff or check; COMMAND --help lists its options")

    _add_build_command(commands)

    render = commands.add_parser("render", help="render one JSON report as standalone HTML or Markdown")
    render.add_argument("report", type=Path, help="a report written by crawl_module (JSON)")
    render.add_argument("--output", "-o", type=Path, required=True, help="OUT.html or OUT.md")
    render.add_argument("--title", default="", help="the page title (default: the model type)")
    render.add_argument("--templates", type=_folder, help="a folder of template overrides")

    diff = commands.add_parser("diff", help="a before/after review of two JSON reports, or of two catalogs (built "
                               "sites or folders of reports), as HTML or Markdown")
    diff.add_argument("before", type=Path, help="BEFORE.json, or the old site or report folder")
    diff.add_argument("after", type=Path, help="AFTER.json, or the new site or report folder")
    diff.add_argument("--output", "-o", type=Path, required=True, help="OUT.html or OUT.md")
    diff.add_argument("--title", default="", help="the page title (default: the run's name in its site's catalog, else the file name)")
    diff.add_argument("--templates", type=_folder, help="a folder of template overrides")
    diff.add_argument("--fail-if", dest="budgets", metavar="BUDGET", type=_budget, action="append", default=[],
                      help="exit with status 1 when the change meets this condition, e.g. 'macs>+5%%' (relative to "
                      "before), 'parameters>1M' or 'training_peak_bytes>80GB' (absolute; byte totals take B, kB, MB, GB, TB); "
                      "repeat for several budgets")
    diff.add_argument("--require-same-model", action="store_true",
                      help="exit with status 3 when the two reports are of different model types")

    check = commands.add_parser("check", help="validate a registry without running any model: every key and value, "
                                "and whether each callable it names can be found (read, never imported)")
    check.add_argument("registry", type=Path, help="the models.toml registry")
    return main


def _add_build_command(commands: Any) -> None:
    """The ``build`` command and its options."""
    build = commands.add_parser("build", help="analyze every registry entry, render the reports, build the site")
    build.add_argument("registry", type=Path, help="the models.toml registry")
    build.add_argument("--output", "-o", type=Path, default=Path("site"), help="output folder (default: ./site; "
                       "replaced as a whole at the end of the build)")
    build.add_argument("--jobs", "-j", type=_positive_int, default=default_jobs(),
                       help="entries analyzed in parallel (default: the CPU count; with --scheduler, the "
                       "cluster's worker threads decide)")
    build.add_argument("--timeout", type=_positive_float, default=600.0,
                       help="seconds one run may take before its worker is killed, for entries without a timeout key "
                       "of their own (default: 600)")
    build.add_argument("--isolation", choices=ISOLATION_MODES, default="worker",
                       help="worker (default): each worker process imports torch once and analyzes entry after entry, "
                       "its state reset in between; run: a fresh process for every entry")
    build.add_argument("--no-cache", action="store_true", help="analyze every entry again, ignoring cached results")
    build.add_argument("--retry-failed", action="store_true", help="run again the runs that timed out in an earlier "
                       "build (otherwise kept as failed until their inputs change or their timeout grows)")
    build.add_argument("--strict", action="store_true", help="also fail entries whose analysis is incomplete")
    build.add_argument("--templates", type=_folder, help="a folder of template overrides (same file names)")
    build.add_argument("--scheduler", type=_scheduler, default=os.environ.get(SCHEDULER_VARIABLE) or None,
                       help="run the analyses on a Dask cluster: a scheduler address (tcp://host:8786) or local:N for "
                       f"a LocalCluster of N worker processes (default: ${SCHEDULER_VARIABLE}, else a local build)")
    build.add_argument("--ship-code", action="store_true", help="with --scheduler: upload the registry folder's "
                       "Python files to the workers instead of expecting them at the same path")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    handler = {"build": _build, "render": _render, "diff": _diff, "check": _check}[args.command]
    try:
        return handler(args)
    except RegistryError as error:
        return _usage_error(str(error))
    except KeyboardInterrupt:
        print("interrupted; the previous output is unchanged", file=sys.stderr)
        return 130


def _build(args: argparse.Namespace) -> int:
    from .build import BuildOptions, OutputFolderError, build
    from .runs.dask_session import ClusterError
    from .runs.progress import make_progress
    from .site.mkdocs_site import SiteBuildError

    registry = load_registry(args.registry, lookups=True)  # check's lookups: a misspelled factory costs no worker run
    options = BuildOptions(output=args.output, jobs=args.jobs, timeout=args.timeout, use_cache=not args.no_cache,
                           strict=args.strict, templates=args.templates, retry_failed=args.retry_failed)
    progress = make_progress()
    try:
        with _executors(args, registry, progress.note) as executor_factory:
            result = build(registry, options, progress, executor_factory)
    except (OutputFolderError, ClusterError) as error:
        return _usage_error(str(error))
    except SiteBuildError as error:
        print(f"error: the MkDocs build failed: {error}", file=sys.stderr)
        return EXIT_FAILED
    for line in [*(f"mkdocs: {warning}" for warning in result.warnings), *result.failure_lines(),
                 result.summary_line()]:
        progress.note(line)
    return result.exit_code


@contextlib.contextmanager
def _executors(args: argparse.Namespace, registry: Registry, note: Callable[[str], None]) -> Iterator[Any]:
    """The build's ExecutorFactory: isolated local processes, or the executor of a Dask session held meanwhile."""
    from .runs.dask_session import ClusterError, DaskSession
    from .runs.runner import executor_factory

    if args.scheduler is None:
        if args.ship_code:
            raise ClusterError(f"--ship-code only applies with --scheduler (or ${SCHEDULER_VARIABLE})")
        yield executor_factory(args.isolation)
        return
    with DaskSession(args.scheduler, ship_from=registry.folder if args.ship_code else None, note=note,
                     isolation=args.isolation) as session:
        yield session.executor_factory


def _render(args: argparse.Namespace) -> int:
    from .output.documents import render_report_file

    kind = _kind_or_exit(args.output)
    report = _read_report(args.report)
    if report is None or kind is None:
        return EXIT_USAGE
    try:
        text = render_report_file(report, kind, title=args.title, templates=args.templates)
    except (KeyError, TypeError) as error:
        return _usage_error(f"{args.report} does not have the shape of a schema_version 1 report ({error!r})")
    _write_output(args.output, text)
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    from .output.documents import diff_document
    from .review.catalog_index import review_title
    from .review.report_diff import diff_view

    if args.before.is_dir() or args.after.is_dir():
        problem = _mixed_sides(args.before, args.after)
        return _usage_error(problem) if problem else _catalog_diff(args)
    scoped = [budget.text for budget in args.budgets if budget.entry]
    if scoped:
        return _usage_error(f"--fail-if {scoped[0]}: an ENTRY: prefix applies to a catalog diff (two folders), "
                            "not to two reports")
    kind = _kind_or_exit(args.output)
    before, after = _read_report(args.before), _read_report(args.after)
    if before is None or after is None or kind is None:
        return EXIT_USAGE
    try:
        title = args.title or review_title(args.before, args.after)
        view = diff_view(before, after, title=title, budgets=args.budgets)
        text = diff_document(view, kind, templates=args.templates)
    except (TypeError, ValueError, KeyError) as error:
        return _usage_error(f"cannot compare these reports: {error}")
    _write_output(args.output, text)
    return _diff_verdict(view, args.require_same_model)


def _catalog_diff(args: argparse.Namespace) -> int:
    """``diff OLD NEW`` of two built sites or report folders: one row per entry, one verdict, budgets per entry."""
    from .output.documents import catalog_diff_document
    from .review.catalog_diff import catalog_diff_view
    from .review.catalog_index import CatalogReadError, read_catalog

    kind = _kind_or_exit(args.output)
    if kind is None:
        return EXIT_USAGE
    try:
        view = catalog_diff_view(read_catalog(args.before), read_catalog(args.after), args.budgets, args.title)
        text = catalog_diff_document(view, kind, templates=args.templates)
    except (CatalogReadError, ValueError) as error:
        return _usage_error(str(error))
    _write_output(args.output, text)
    print(view.verdict, file=sys.stderr if view.budget_failed else sys.stdout)
    for row in view.failing:  # the met ones are counted on the verdict line; a catalog has many
        for budget in row.budgets:
            if budget.failed:
                print(f"budget {budget.verdict}: {row.label}: {budget.budget}: {budget.observed}", file=sys.stderr)
    if args.require_same_model and not view.same_model:
        names = ", ".join(row.label for row in view.rows if row.other_model)
        print(f"error: --require-same-model: these entries changed model type: {names}", file=sys.stderr)
        return EXIT_DIFFERENT_MODELS
    return EXIT_FAILED if view.budget_failed else EXIT_OK


def _mixed_sides(before: Path, after: Path) -> str | None:
    """Why a diff with a folder on one side cannot run (``None`` when both sides are folders)."""
    for path in (before, after):
        if not path.exists():
            return f"{path} does not exist"
    if before.is_dir() and after.is_dir():
        return None
    folder, other = (before, after) if before.is_dir() else (after, before)
    return f"diff compares two reports or two catalogs: {folder} is a folder, {other} is not"


def _usage_error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _diff_verdict(view: Any, require_same_model: bool) -> int:
    """Print the review's warnings and budget verdicts; the exit status a CI gate acts on."""
    for warning in view.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for row in view.budgets:
        print(f"budget {row.verdict}: {row.budget}: {row.observed}", file=sys.stderr if row.failed else sys.stdout)
    if require_same_model and not view.same_model:
        print("error: --require-same-model: the two reports are of different models", file=sys.stderr)
        return EXIT_DIFFERENT_MODELS
    return EXIT_FAILED if view.budget_failed else EXIT_OK


def _check(args: argparse.Namespace) -> int:
    """Every mistake in one round: structure, values and missing callables (exit 2), or callables alone (exit 1)."""
    reading = read_registry(args.registry)
    if reading.problems:
        raise RegistryError(reading.registry.path, reading.problems + reading.missing)
    for line in reading.missing:
        print(f"error: {line}", file=sys.stderr)
    registry = reading.registry
    counted = f"{plural(len(registry.entries), 'entry', 'entries')} ({plural(len(registry.runs), 'run')})"
    missing = len(reading.missing)
    found = "valid" if not missing else f"valid, but {plural(missing, 'callable')} cannot be found"
    print(f"{registry.path.name}: {counted} {found}")
    return EXIT_FAILED if missing else EXIT_OK


def _kind_or_exit(path: Path) -> str | None:
    from .output.templates import output_kind

    try:
        return output_kind(path)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return None


def _read_report(path: Path) -> dict[str, Any] | None:
    """The report at ``path``, read as a catalog diff reads one; None (the error printed) when it is not one."""
    from .review.catalog_index import CatalogReadError, read_report

    try:
        return read_report(path)
    except CatalogReadError as error:
        print(f"error: {error}", file=sys.stderr)
        return None


def _write_output(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive integer")
    return value


def _budget(text: str) -> Any:
    from .review.budgets import parse_budget

    try:
        return parse_budget(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("expected a positive number of seconds")
    return value


def _scheduler(text: str) -> str | int:
    from .runs.dask_session import parse_scheduler

    try:
        return parse_scheduler(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error} (from --scheduler or ${SCHEDULER_VARIABLE})") from None


def _folder(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    return path.resolve()


if __name__ == "__main__":
    sys.exit(main())
