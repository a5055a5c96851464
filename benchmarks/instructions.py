"""Analysis overhead in CPU instructions: deterministic, whatever else the machine is doing.

Wall-clock ratios (``benchmarks/overhead.py``) move by a tenth or more between runs on a shared machine. This
script counts instructions instead, with valgrind's callgrind, so that two versions of TorchScan can be compared
exactly: each variant runs twice in a fresh interpreter (after two warm-up runs), and only the instructions of
those two runs are collected. It prints, per layer call, the instructions that each variant adds to a plain
``no_grad`` forward:

* ``hooks`` and ``floor``: PyTorch's own part (the global hook pair calling functions that do nothing; ``floor``
  adds a dispatch mode that only runs each operator, see overhead.py);
* ``crawl`` and ``structure``: ``crawl_module`` in full and structure mode;
* ``own`` and ``structure own``: ``crawl - floor`` and ``structure - hooks``, TorchScan's own work.

Inputs are small (32x32 images, 16 tokens) so that the kernels, which a dispatch mode does not change, do not
dominate the counts or the time: callgrind runs Python about fifty times slower, and each variant also pays a
``torch`` import (about a minute and a half). Needs ``valgrind`` on the PATH.

    python benchmarks/instructions.py [--models mobilenet,resnet50] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "benchmarks")]
sys.path[:0] = PATHS

import overhead
from selection import selected

VARIANTS = ("plain", "hooks", "floor", "crawl", "structure")

RUNNER = """
import functools, sys
sys.path[:0] = {paths!r}
import torch
torch.set_num_threads(1)
import overhead
model, args, kwargs = overhead.SMALL_CASES[{case!r}]()
model.eval()
run = overhead.variants(model, args, kwargs)[{variant!r}]
run(); run()
functools.reduce(lambda _, __: run(), range(2), None)  # only what runs inside reduce is collected
if {variant!r} == "plain":
    print(len(overhead.crawl_module(model, args=args, kwargs=kwargs, mode="structure")["layers"]))
"""


def instructions(case: str, variant: str) -> tuple[int, str]:
    """Instructions of two runs of ``variant`` on ``case``, and what the runner printed."""
    code = RUNNER.format(paths=PATHS, case=case, variant=variant)
    with tempfile.TemporaryDirectory() as folder:
        command = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
                   f"--callgrind-out-file={folder}/out", sys.executable, "-c", code]
        # a fixed hash seed: set and dict orders (and so the counts) are then the same in every run
        environment = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, check=True, env=environment)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind reported no count for {case} {variant}:\n{done.stderr[-2000:]}")
    return int(found.group(1)) // 2, done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma-separated parts of model names to keep")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at a time (default 2)")
    options = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (apt-get install valgrind)")
    names = selected(options.models, overhead.SMALL_CASES)
    jobs = [(name, variant) for name in names for variant in VARIANTS]
    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: instructions(*job), jobs)))
    columns = (*VARIANTS[1:], "own", "structure own")
    widths = [max(11, len(column) + 2) for column in columns]
    print(f"{'model':<17}{'calls':>7}{'plain M':>10}"
          + "".join(f"{column:>{width}}" for column, width in zip(columns, widths))
          + "   (thousand instructions per layer call over plain)")
    for name in names:
        plain, printed = counts[(name, "plain")]
        calls = int(printed.splitlines()[-1])
        extra = {variant: (counts[(name, variant)][0] - plain) / calls / 1e3 for variant in VARIANTS[1:]}
        extra["own"] = extra["crawl"] - extra["floor"]
        extra["structure own"] = extra["structure"] - extra["hooks"]
        print(f"{name:<17}{calls:>7}{plain / 1e6:>10.1f}"
              + "".join(f"{extra[column]:>{width}.1f}" for column, width in zip(columns, widths)))


if __name__ == "__main__":
    main()
