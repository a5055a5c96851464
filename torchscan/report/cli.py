"""The ``torchscan-report`` command line: build, render, diff and check.

Exit codes: 0 success; 1 some entries failed (build: the site is still built; check: a callable cannot be found);
2 a registry or usage error (nothing written).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .. import __version__
from .registry import Registry, RegistryError, load_registry
from .runner import default_jobs

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="torchscan-report", description="Cost reports and model-zoo catalog sites "
                                   "for PyTorch models, from a models.toml registry.")
    main.add_argument("--version", action="version", version=f"torchscan-report {__version__}")
    commands = main.add_subparsers(dest="command", required=True, metavar="COMMAND")

    build = commands.add_parser("build", help="analyze every registry entry, render the reports, build the site")
    build.add_argument("registry", type=Path, help="the models.toml registry")
    build.add_argument("--output", "-o", type=Path, default=Path("site"), help="output folder (default: ./site; "
                       "replaced as a whole at the end of the build)")
    build.add_argument("--jobs", "-j", type=_positive_int, default=default_jobs(),
                       help="entries analyzed in parallel (default: the CPU count)")
    build.add_argument("--timeout", type=_positive_float, default=600.0,
                       help="seconds one entry may run before its worker is killed (default: 600)")
    build.add_argument("--no-cache", action="store_true", help="analyze every entry again, ignoring cached results")
    build.add_argument("--strict", action="store_true", help="also fail entries whose analysis is incomplete")
    build.add_argument("--templates", type=_folder, help="a folder of template overrides (same file names)")

    render = commands.add_parser("render", help="render one JSON report as standalone HTML or Markdown")
    render.add_argument("report", type=Path, help="a report written by crawl_module (JSON)")
    render.add_argument("--output", "-o", type=Path, required=True, help="OUT.html or OUT.md")
    render.add_argument("--title", default="", help="the page title (default: the model type)")
    render.add_argument("--templates", type=_folder, help="a folder of template overrides")

    diff = commands.add_parser("diff", help="a before/after review of two JSON reports (HTML or Markdown)")
    diff.add_argument("before", type=Path)
    diff.add_argument("after", type=Path)
    diff.add_argument("--output", "-o", type=Path, required=True, help="OUT.html or OUT.md")
    diff.add_argument("--title", default="Before / after", help="the page title")
    diff.add_argument("--templates", type=_folder, help="a folder of template overrides")

    check = commands.add_parser("check", help="validate a registry without running any model")
    check.add_argument("registry", type=Path)
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    handler = {"build": _build, "render": _render, "diff": _diff, "check": _check}[args.command]
    try:
        return handler(args)
    except RegistryError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted; the previous output is unchanged", file=sys.stderr)
        return 130


def _build(args: argparse.Namespace) -> int:
    from .build import BuildOptions, OutputFolderError, build
    from .progress import make_progress
    from .site import SiteBuildError

    registry = load_registry(args.registry)
    options = BuildOptions(output=args.output, jobs=args.jobs, timeout=args.timeout, use_cache=not args.no_cache,
                           strict=args.strict, templates=args.templates)
    progress = make_progress()
    try:
        result = build(registry, options, progress)
    except OutputFolderError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except SiteBuildError as error:
        print(f"error: the MkDocs build failed: {error}", file=sys.stderr)
        return EXIT_FAILED
    for warning in result.warnings:
        progress.note(f"mkdocs: {warning}")
    for line in [*result.failure_lines(), result.summary_line()]:
        progress.note(line)
    return result.exit_code


def _render(args: argparse.Namespace) -> int:
    from .documents import render_report_file

    kind = _kind_or_exit(args.output)
    report = _read_report(args.report)
    if report is None or kind is None:
        return EXIT_USAGE
    try:
        text = render_report_file(report, kind, title=args.title, templates=args.templates)
    except (KeyError, TypeError) as error:
        print(f"error: {args.report} does not have the shape of a schema_version 1 report ({error!r})",
              file=sys.stderr)
        return EXIT_USAGE
    _write_output(args.output, text)
    return EXIT_OK


def _diff(args: argparse.Namespace) -> int:
    from .documents import render_diff_file

    kind = _kind_or_exit(args.output)
    before, after = _read_report(args.before), _read_report(args.after)
    if before is None or after is None or kind is None:
        return EXIT_USAGE
    try:
        text = render_diff_file(before, after, kind, title=args.title, templates=args.templates)
    except (TypeError, ValueError, KeyError) as error:
        print(f"error: cannot compare these reports: {error}", file=sys.stderr)
        return EXIT_USAGE
    _write_output(args.output, text)
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from .sources import callable_problem

    registry: Registry = load_registry(args.registry)
    problems = []
    for index, entry in enumerate(registry.entries):
        targets = {("factory", entry.factory)}
        targets |= {("inputs", run.inputs.callable) for run in entry.runs if run.inputs.callable}
        for key, target in sorted(targets):
            problem = callable_problem(target, registry.folder)
            if problem:
                problems.append(f"models[{index}] ({entry.name}): {key}: {problem}")
    for line in problems:
        print(f"error: {line}", file=sys.stderr)
    runs = len(registry.runs)
    print(f"{registry.path.name}: {len(registry.entries)} entries ({runs} runs) "
          + ("valid" if not problems else f"valid, but {len(problems)} callable(s) cannot be found"))
    return EXIT_FAILED if problems else EXIT_OK


def _kind_or_exit(path: Path) -> str | None:
    from .render import output_kind

    try:
        return output_kind(path)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return None


def _read_report(path: Path) -> dict[str, Any] | None:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        print(f"error: cannot read the report {path}: {error}", file=sys.stderr)
        return None
    if not isinstance(report, dict) or report.get("schema_version") != 1 or "layers" not in report:
        print(f"error: {path} is not a TorchScan report (schema_version 1)", file=sys.stderr)
        return None
    return report


def _write_output(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive integer")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("expected a positive number of seconds")
    return value


def _folder(text: str) -> Path:
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is not a folder")
    return path.resolve()


if __name__ == "__main__":
    sys.exit(main())
