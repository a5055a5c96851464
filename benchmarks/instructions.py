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

``--around`` also counts a full analysis whose model forward returns its input at once: its instructions are
what an analysis costs around the forward (module walk and facts, parameter statistics, the report of one call,
freeing the analysis state), spread here over the layer calls of the real forward (``around``); ``own - around``
is then the part that grows with each layer call (hooks, estimates, operators).

``--objects`` also says where those instructions run, by shared object: the Python interpreter (``libpython``:
every Python function, TorchScan's and PyTorch's own Python code alike), PyTorch's Python bindings
(``libtorch_python``: reading ``tensor.shape`` and the dispatch mode's entry into Python), PyTorch's dispatcher and
kernels (``libtorch_cpu``, ``libc10``) and the C library (``libc``: allocation). A function's own instructions
count for the object it is in; calls to other objects count there.

Inputs are small (32x32 images, 16 tokens) so that the kernels, which a dispatch mode does not change, do not
dominate the counts or the time: callgrind runs Python about fifty times slower, and each variant also pays a
``torch`` import (about a minute and a half). Needs ``valgrind`` on the PATH.

    python benchmarks/instructions.py [--models mobilenet,resnet50] [--jobs 2] [--objects] [--around]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATHS = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "benchmarks")]
sys.path[:0] = PATHS

import overhead  # noqa: E402
from selection import selected  # noqa: E402

VARIANTS = ("plain", "hooks", "floor", "crawl", "structure")

RUNNER = """
import functools, sys
sys.path[:0] = {paths!r}
import torch
torch.set_num_threads(1)
import overhead
model, args, kwargs = overhead.SMALL_CASES[{case!r}]()
model.eval()
if {variant!r} == "around":  # the analysis without the model's work: what it costs around the forward
    model.forward = lambda *args, **kwargs: args[0]
run = overhead.variants(model, args, kwargs)["crawl" if {variant!r} == "around" else {variant!r}]
run(); run()
functools.reduce(lambda _, __: run(), range(2), None)  # only what runs inside reduce is collected
if {variant!r} == "plain":
    print(len(overhead.crawl_module(model, args=args, kwargs=kwargs, mode="structure")["layers"]))
"""


def instructions(case: str, variant: str) -> tuple[int, str, Counter[str]]:
    """Instructions of two runs of ``variant`` on ``case``, what the runner printed, and the instructions by shared
    object (`by_object`)."""
    code = RUNNER.format(paths=PATHS, case=case, variant=variant)
    with tempfile.TemporaryDirectory() as folder:
        command = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
                   f"--callgrind-out-file={folder}/out", sys.executable, "-c", code]
        # a fixed hash seed: set and dict orders (and so the counts) are then the same in every run
        environment = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, check=True, env=environment)
        objects = by_object(Path(folder, "out").read_text(encoding="utf-8"))
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind reported no count for {case} {variant}:\n{done.stderr[-2000:]}")
    return int(found.group(1)) // 2, done.stdout.strip(), objects


#: An object's name as a callgrind profile gives it: ``ob=(3) /usr/lib/libc.so.6`` defines number 3 (so does a
#: ``cob=`` line, for the object a call goes to), and a later ``ob=(3)`` refers to it.
OBJECT = re.compile(r"c?ob=\((\d+)\)(?: (.*))?")


def by_object(profile: str) -> Counter[str]:
    """A callgrind profile's instructions by shared object (the file name; ``?`` for code of no file), each
    function's own: the cost line after a ``calls=`` line is the callee's inclusive cost and is skipped."""
    names: dict[str, str] = {}
    counts: Counter[str] = Counter()
    current, after_call = "?", False
    for line in profile.splitlines():
        named = OBJECT.match(line)
        if named:
            number, name = named.groups()
            if name:
                names[number] = Path(name).name
            if line.startswith("ob="):
                current = names.get(number, "?")
        elif line.startswith("calls="):
            after_call = True
        elif line[:1].isdigit() or line[:1] in "+-*":  # a cost line: position(s), then the instructions
            parts = line.split()
            if not after_call and len(parts) > 1:
                counts[current] += int(parts[-1])
            after_call = False
    return counts


def print_objects(name: str, calls: int, counts: dict[str, Counter[str]]) -> None:
    """Per layer call, the instructions each variant adds to a plain forward, by shared object (most first)."""
    plain = counts["plain"]
    extra = {variant: {item: (counts[variant][item] - plain[item]) / 2 / calls / 1e3 for item in counts[variant]}
             for variant in VARIANTS[1:]}
    extra["own"] = {item: extra["crawl"].get(item, 0) - extra["floor"].get(item, 0) for item in extra["crawl"]}
    extra["structure own"] = {item: extra["structure"].get(item, 0) - extra["hooks"].get(item, 0)
                              for item in extra["structure"]}
    items = sorted({item for row in extra.values() for item in row}, key=lambda item: -abs(extra["crawl"].get(item, 0)))
    columns = list(extra)
    print(f"\n{name}: thousand instructions per layer call over plain, by shared object")
    print(f"{'object':<28}" + "".join(f"{column:>15}" for column in columns))
    for item in items[:8]:
        print(f"{item[:27]:<28}" + "".join(f"{extra[column].get(item, 0):>15.1f}" for column in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma-separated parts of model names to keep")
    parser.add_argument("--jobs", type=int, default=2, help="valgrind runs at a time (default 2)")
    parser.add_argument("--objects", action="store_true", help="also the instructions by shared object")
    parser.add_argument("--around", action="store_true", help="also what a full analysis costs around the forward")
    options = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH (apt-get install valgrind)")
    names = selected(options.models, overhead.SMALL_CASES)
    variants = (*VARIANTS, "around") if options.around else VARIANTS
    jobs = [(name, variant) for name in names for variant in variants]
    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: instructions(*job), jobs), strict=True))
    columns = (*VARIANTS[1:], "own", "structure own", *(("around", "own - around") if options.around else ()))
    widths = [max(11, len(column) + 2) for column in columns]
    print(f"{'model':<17}{'calls':>7}{'plain M':>10}"
          + "".join(f"{column:>{width}}" for column, width in zip(columns, widths, strict=True))
          + "   (thousand instructions per layer call over plain)")
    for name in names:
        plain, printed, _ = counts[(name, "plain")]
        calls = int(printed.splitlines()[-1])
        extra = {variant: (counts[(name, variant)][0] - plain) / calls / 1e3 for variant in VARIANTS[1:]}
        extra["own"] = extra["crawl"] - extra["floor"]
        extra["structure own"] = extra["structure"] - extra["hooks"]
        if options.around:
            extra["around"] = counts[(name, "around")][0] / calls / 1e3
            extra["own - around"] = extra["own"] - extra["around"]
        print(f"{name:<17}{calls:>7}{plain / 1e6:>10.1f}"
              + "".join(f"{extra[column]:>{width}.1f}" for column, width in zip(columns, widths, strict=True)))
        if options.objects:
            print_objects(name, calls, {variant: counts[(name, variant)][2] for variant in VARIANTS})


if __name__ == "__main__":
    main()
