"""Measure builds on a Dask cluster against local builds (issue 15).

1. A cold build (``--no-cache``) of a registry, locally (``--jobs N``) and through ``--scheduler local:N``, each in a
   fresh console-script process as a user would run it; the two outputs are compared byte for byte.
2. The scheduling overhead per run: the same trivial run (``nn.Identity``, each in its own ``spawn`` process),
   submitted alone, alternately to a local isolated executor and to a started one-worker ``LocalCluster`` (so
   that both see the same machine load); the median of the pairwise differences is what Dask adds to each run.
   The round trip of an empty Dask task and the cluster's start-up time are printed beside it.

    python benchmarks/cluster.py [--workers N] [--registry PATH] [--runs K] [--skip-builds]
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchscan.report.runs.dask_session import DaskSession  # noqa: E402
from torchscan.report.runs.isolated_executor import IsolatedProcessExecutor  # noqa: E402

TRIVIAL = {"entry": "identity", "variant": None, "stem": "identity", "folder": str(ROOT), "factory":
           "torch.nn:Identity", "kwargs": {}, "inputs": {"shapes": [[4]], "dtypes": None}, "device": "cpu"}


def command() -> list[str]:
    installed = shutil.which("torchscan-report")
    return [installed] if installed else [sys.executable, "-m", "torchscan.report.cli"]


def timed_build(registry: Path, output: Path, *extra: str) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TORCHSCAN_SCHEDULER", None)
    started = time.perf_counter()
    result = subprocess.run([*command(), "build", str(registry), "--output", str(output), "--no-cache", *extra],
                            env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode not in (0, 1):
        sys.stderr.write(result.stderr)
        raise SystemExit(f"build failed with exit status {result.returncode}")
    return elapsed


def differences(left: Path, right: Path) -> list[str]:
    """Relative paths of the files that are not the same in both folders (present in one only, or different)."""
    files = {path.relative_to(left).as_posix() for path in left.rglob("*") if path.is_file()}
    others = {path.relative_to(right).as_posix() for path in right.rglob("*") if path.is_file()}
    return sorted((files ^ others) | {name for name in files & others
                                      if not filecmp.cmp(left / name, right / name, shallow=False)})


def timed_run(executor) -> float:
    from torchscan.report.runs.worker import analyze_run

    started = time.perf_counter()
    result = executor.submit(analyze_run, dict(TRIVIAL)).result()
    assert result["status"] == "ok", result
    return time.perf_counter() - started


def overhead(runs: int) -> None:
    """Median seconds of one trivial run submitted alone, locally and on the cluster, measured alternately."""
    started = time.perf_counter()
    with DaskSession(1, isolation="run") as session:  # both sides start a process per run, as locally below
        remote = session.executor_factory(1, 600.0)
        startup = time.perf_counter() - started
        local = IsolatedProcessExecutor(max_workers=1, timeout=600)
        timed_run(remote)  # the worker imports torchscan and torch once
        pairs = [(timed_run(local), timed_run(remote)) for _ in range(runs)]
        local.shutdown()
        client = session.client
        client.submit(int, 0, pure=False).result()
        begun = time.perf_counter()
        for value in range(20):
            client.submit(int, value, pure=False).result()
        round_trip = (time.perf_counter() - begun) / 20
    local_median = statistics.median(pair[0] for pair in pairs)
    dask_median = statistics.median(pair[1] for pair in pairs)
    added = statistics.median(pair[1] - pair[0] for pair in pairs)
    print(f"one trivial run, alone ({runs} pairs, medians): local {local_median:.2f} s, on a LocalCluster worker "
          f"{dask_median:.2f} s; Dask adds {added:+.2f} s per run (median of the pairwise differences)")
    print(f"empty Dask task round trip: {round_trip * 1000:.1f} ms; LocalCluster(1) start-up and checks: "
          f"{startup:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--registry", type=Path, default=ROOT / "site_models" / "models.toml")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--skip-builds", action="store_true")
    args = parser.parse_args()
    print(f"CPUs: {os.cpu_count()}  load average: {' '.join(f'{value:.1f}' for value in os.getloadavg())}")
    if not args.skip_builds:
        work = Path(tempfile.mkdtemp(prefix="torchscan-cluster-bench-"))
        try:
            local = timed_build(args.registry, work / "local", "--jobs", str(args.workers))
            dask = timed_build(args.registry, work / "dask", "--scheduler", f"local:{args.workers}")
            different = differences(work / "local", work / "dask")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"cold build of {args.registry.name}: local --jobs {args.workers} {local:.1f} s, --scheduler "
              f"local:{args.workers} {dask:.1f} s ({dask / local:.2f}x); outputs byte-identical: {not different}")
        for name in different:
            print(f"  differs: {name}")
    overhead(args.runs)


if __name__ == "__main__":
    main()
