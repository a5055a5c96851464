"""Overhead before and after a change: ``overhead.py`` of two checkouts, alternating, each model in fresh processes.

One run of ``overhead.py`` measures every variant in one process, which removes the noise between variants but not
the noise between processes: on a small machine, the memory allocator of one process may return a forward's
activations to the system and fault them in again on every forward while another keeps them, which moves a ratio
by a tenth from one process to the next. This script runs ``overhead.py`` for one model at a time, in a checkout
and in this one, alternately for ``--rounds`` rounds, each in a fresh interpreter, and prints, per model and
variant, the median over the rounds of each checkout's ratio to a plain forward, and the change in percent.

    python benchmarks/compare_overhead.py BEFORE_CHECKOUT [--rounds 5] [--models mobilenet_v2,resnet50]
        [--repeats 9] [--threads 1] [--stat min]

``BEFORE_CHECKOUT`` is a directory holding another version of this repository (``git worktree add /tmp/before
<commit>``) whose ``benchmarks/overhead.py`` is run as it is there; only the variants both versions measure are
compared. Run it on a quiet machine: rounds alternate, so a load that comes and goes hits both checkouts alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The columns of ``overhead.py`` that are ratios to a plain forward (the others are times and counts).
RATIO_SUFFIX = "x"


def overhead_rows(checkout: Path, model: str, options: argparse.Namespace) -> dict[str, dict[str, float]]:
    """One fresh run of ``checkout``'s ``overhead.py`` for the models matching ``model``: ratio columns by row."""
    command = [sys.executable, "benchmarks/overhead.py", "--models", model, "--no-memory", "--repeats",
               str(options.repeats), "--threads", str(options.threads), "--stat", options.stat]
    run = subprocess.run(command, cwd=checkout, check=False, capture_output=True, text=True)
    if run.returncode:  # a model that one version cannot build: the rows printed before it still count
        last = run.stderr.strip().splitlines()[-1:] or ["no error output"]
        print(f"{checkout}: overhead.py --models {model} exited with {run.returncode}: {last[0]}", file=sys.stderr)
    lines = run.stdout.splitlines()
    header = next((line for line in lines if line.startswith("model")), None)
    if header is None:
        return {}
    names = header.replace("plain ms", "plain_ms").replace("crawl us/call", "crawl_us").replace(
        "own us", "own_us").replace("structure own", "structure_own").split()
    rows = {}
    for line in lines:
        cells = line.split()
        if len(cells) == len(names) and cells[1].isdigit():
            rows[cells[0]] = {name: float(cell[:-1]) for name, cell in zip(names, cells, strict=True)
                              if cell.endswith(RATIO_SUFFIX)}
    return rows


def compare(before: Path, options: argparse.Namespace) -> None:
    """Alternate the two checkouts per model and round; print each model's medians and change once it is done."""
    print(f"median of {options.rounds} fresh-process rounds per checkout ({options.stat} of {options.repeats} "
          f"alternating runs in each, {options.threads} thread(s)); before: {before}")
    print(f"{'model':<17}{'variant':<17}{'before':>8}{'after':>8}{'change':>9}", flush=True)
    for model in options.models.split(","):
        samples: dict[tuple[str, str], dict[str, list[float]]] = {}
        for _ in range(options.rounds):
            for side, checkout in (("before", before), ("after", ROOT)):
                for row, ratios in overhead_rows(checkout, model, options).items():
                    for variant, ratio in ratios.items():
                        samples.setdefault((row, variant), {"before": [], "after": []})[side].append(ratio)
        for (row, variant), sides in samples.items():
            if sides["before"] and sides["after"]:  # else a variant or model that one version does not measure
                first, second = statistics.median(sides["before"]), statistics.median(sides["after"])
                print(f"{row:<17}{variant:<17}{first:>7.2f}x{second:>7.2f}x{(second / first - 1) * 100:>+8.1f}%",
                      flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="a checkout of the version to compare with")
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per model and checkout (default 5)")
    parser.add_argument("--models", default="mobilenet_v2,resnet50,bert_base,transformer,llama2_70b_meta",
                        help="comma-separated parts of model names, each passed to overhead.py's --models in "
                             "processes of its own (resnet50 also selects tv_resnet50)")
    parser.add_argument("--repeats", type=int, default=9, help="alternating runs inside each process (default 9)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--stat", choices=("min", "median"), default="min",
                        help="statistic of the runs inside each process (default min)")
    options = parser.parse_args()
    if options.rounds < 1 or options.repeats < 1:
        parser.error(f"--rounds and --repeats must be at least 1, got {options.rounds} and {options.repeats}")
    if not (options.before / "benchmarks" / "overhead.py").is_file():
        parser.error(f"before: {options.before} holds no benchmarks/overhead.py (expected a checkout of this "
                     "repository)")
    compare(options.before, options)


if __name__ == "__main__":
    main()
