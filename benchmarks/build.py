"""Measure `torchscan-report build site_models/models.toml`: a cold build, then an unchanged rebuild.

Targets (issue 6): the cold build under 120 s on 2 cores, the unchanged rebuild (every result cached) under 10 s.
Each build runs the console script in a fresh process, exactly as a user would, into a temporary output folder.

    python benchmarks/build.py [--jobs N] [--registry PATH] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"cold": 120.0, "unchanged": 10.0}


def command() -> list[str]:
    installed = shutil.which("torchscan-report")
    return [installed] if installed else [sys.executable, "-m", "torchscan.report.cli"]


def timed_build(registry: Path, output: Path, jobs: int, *extra: str) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    result = subprocess.run([*command(), "build", str(registry), "--output", str(output), "--jobs", str(jobs),
                             *extra], env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        raise SystemExit(f"build failed with exit status {result.returncode}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--registry", type=Path, default=ROOT / "site_models" / "models.toml")
    parser.add_argument("--keep", type=Path, help="build into this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="torchscan-build-bench-"))
    output = args.keep or work / "site"
    if output.exists():
        shutil.rmtree(output)
    try:
        cold = timed_build(args.registry, output, args.jobs, "--no-cache")
        unchanged = timed_build(args.registry, output, args.jobs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"registry: {args.registry}  jobs: {args.jobs}  CPUs: {os.cpu_count()}")
    for name, seconds in (("cold", cold), ("unchanged", unchanged)):
        target = TARGETS[name]
        verdict = "within" if seconds < target else "OVER"
        print(f"{name:>9} build: {seconds:7.1f} s  ({seconds / target:.2f} of the {target:.0f} s target, {verdict})")
    print(f"unchanged / cold: {unchanged / cold:.3f}")


if __name__ == "__main__":
    main()
