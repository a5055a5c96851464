"""Measure `torchscan-report build` on synthetic registries of small CNNs: cold, unchanged, one entry changed.

Issue 34's targets, on two cores: 200 entries cold <= 40 s, unchanged <= 8 s, one entry changed <= 10 s; 1,000
entries cold <= 3 min, unchanged <= 30 s. Each registry holds N tiny CNNs (``input_shape = [3, 32, 32]``) whose
widths and depths vary, so that their reports, charts and pages differ. Each build runs the console script in a
fresh process, exactly as a user would, into a temporary folder; the build's own timing line splits the wall time
into TorchScan's part (analysis, rendering, writing) and MkDocs' part.

    python benchmarks/build.py [--sizes 200 1000] [--jobs N] [--keep DIR]
    python benchmarks/build.py --registry site_models/models.toml   # cold and unchanged only
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Seconds by (entries, scenario), from the issue; sizes without targets are measured only.
TARGETS = {(200, "cold"): 40.0, (200, "unchanged"): 8.0, (200, "one changed"): 10.0, (1000, "cold"): 180.0,
           (1000, "unchanged"): 30.0}
TIMING = re.compile(r"TorchScan ([\d.]+) s \(analysis ([\d.]+) s, rendering ([\d.]+) s, (?:site kept [\d.]+ s, )?"
                    r"writing ([\d.]+) s\), MkDocs (?:([\d.]+) s|not run)")
MODELS = '''"""Tiny CNNs for the build benchmark: a few milliseconds of analysis each."""
from torch import nn


def cnn(width: int = 8, depth: int = 1):
    layers = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU()]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10))
'''
TAGS = ("narrow", "wide", "shallow", "deep")


@dataclass
class Timed:
    """One build: its wall time and the build's own split (``None`` when its timing line was not found)."""

    wall: float
    torchscan: float | None = None
    mkdocs: float | None = None
    rendering: float | None = None


def entry_toml(index: int, width_offset: int = 0) -> str:
    width, depth = 4 + (index * 7) % 60 + width_offset, 1 + index % 3
    tags = [TAGS[0] if width < 34 else TAGS[1], TAGS[2] if depth == 1 else TAGS[3]]
    return (f'[[models]]\nname = "cnn-{index:04d}"\nfactory = "tiny_cnns:cnn"\nkwargs = {{ width = {width}, '
            f'depth = {depth} }}\ninput_shape = [3, 32, 32]\ntags = {tags!r}\n'.replace("'", '"'))


def write_registry(folder: Path, entries: int, changed: bool = False) -> Path:
    """A registry of ``entries`` tiny CNNs; ``changed`` widens the first one (one entry changed)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny_cnns.py").write_text(MODELS, encoding="utf-8")
    header = f'[catalog]\ntitle = "{entries:,} tiny CNNs"\n\n'
    body = "\n".join(entry_toml(index, 1 if changed and index == 0 else 0) for index in range(entries))
    registry = folder / "models.toml"
    registry.write_text(header + body, encoding="utf-8")
    return registry


def command() -> list[str]:
    return [sys.executable, "-m", "torchscan.report.cli"]


def timed_build(registry: Path, output: Path, jobs: int, *extra: str) -> Timed:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    result = subprocess.run([*command(), "build", str(registry), "--output", str(output), "--jobs", str(jobs),
                             *extra], env=env, capture_output=True, text=True, check=False, cwd=registry.parent)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.stderr.write(result.stderr)
        raise SystemExit(f"build failed with exit status {result.returncode}")
    found = TIMING.search(result.stderr)
    if found is None:
        return Timed(elapsed)
    return Timed(elapsed, float(found.group(1)), float(found.group(5) or 0), float(found.group(3)))


def report(entries: int | None, scenario: str, timed: Timed) -> None:
    """One line: wall time, per-entry cost, TorchScan's and MkDocs' parts, and the target when there is one."""
    line = f"{scenario:>12}: {timed.wall:7.1f} s"
    if entries:
        line += f"  ({timed.wall / entries * 1000:6.1f} ms per entry)"
    if timed.torchscan is not None and timed.mkdocs is not None:
        line += f"  TorchScan {timed.torchscan:6.1f} s (rendering {timed.rendering:5.1f} s), MkDocs {timed.mkdocs:6.1f} s"
    target = TARGETS.get((entries or 0, scenario))
    if target is not None:
        line += f"  target {target:.0f} s: {'within' if timed.wall <= target else 'OVER'}"
    # The machine's load after the build: timings taken beside other work are indicative only.
    line += f"  load {os.getloadavg()[0]:.2f}"
    print(line, flush=True)


def synthetic(entries: int, work: Path, jobs: int) -> None:
    """Cold, unchanged and one-entry-changed builds of a registry of ``entries`` tiny CNNs."""
    folder = work / f"registry-{entries}"
    registry = write_registry(folder, entries)
    output = folder / "site"
    print(f"{entries} entries, --jobs {jobs}, {os.cpu_count()} CPUs", flush=True)
    report(entries, "cold", timed_build(registry, output, jobs, "--no-cache"))
    report(entries, "unchanged", timed_build(registry, output, jobs))
    write_registry(folder, entries, changed=True)
    report(entries, "one changed", timed_build(registry, output, jobs))


def existing(registry: Path, work: Path, jobs: int) -> None:
    """Cold and unchanged builds of an existing registry (``site_models/models.toml``, say)."""
    output = work / "site"
    print(f"registry: {registry}  jobs: {jobs}  CPUs: {os.cpu_count()}", flush=True)
    report(None, "cold", timed_build(registry.resolve(), output, jobs, "--no-cache"))
    report(None, "unchanged", timed_build(registry.resolve(), output, jobs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 1000], help="entries per synthetic registry")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--registry", type=Path, help="measure this registry instead of synthetic ones")
    parser.add_argument("--keep", type=Path, help="build in this folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="torchscan-build-bench-"))
    try:
        if args.registry is not None:
            existing(args.registry, work, args.jobs)
        else:
            for entries in args.sizes:
                synthetic(entries, work, args.jobs)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
