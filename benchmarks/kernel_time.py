"""Where a full analysis's extra wall time goes: PyTorch's dispatch mode, slower kernels, and TorchScan's Python.

``overhead.py`` gives one ratio per model. This script splits a full analysis's extra time over a plain forward in
three, by timing every operator's kernel (the call of the ``OpOverload`` itself) under two dispatch modes that
run in alternation on the same inputs:

* ``bare``: a dispatch mode that only runs each operator and times it (as ``floor`` in overhead.py, without the
  module hooks). ``bare - plain`` is PyTorch's own price of observing every operator from Python;
* ``crawl``: ``crawl_module`` in full, its recorder's kernel calls timed the same way (through
  ``operator_cache._runner``, which the recorder calls for every operator).

The same kernels take a little longer inside an analysis than under the bare mode, about as long as under a bare
mode that idles between operators (``--gap``, in microseconds): the gaps between kernels cost the kernels some
speed, whatever fills them. That part, ``crawl kernels - bare kernels``, is not spent in TorchScan's code. The rest,
``crawl - bare - slower kernels``, is TorchScan's work with PyTorch's module-hook path (about 1.0x-1.1x of a plain
forward, overhead.py's ``hooks``). The two timer reads per operator cost alike in both modes.

``--split`` also times, in a second set of rounds, where TorchScan's own part runs: around the forward, its
set-up (module walk and facts), its assembly (parameter statistics, the report) and the rest (entering and leaving
the hooks and the mode, the root call's hooks, freeing the analysis state); then the bodies of its two global module
hooks (records, module estimates, operator scopes) and its dispatch mode's own work around each kernel (signatures,
operator memo). Those timers add about a microsecond per hook call and operator. Run it on a quiet machine:
medians of the alternating rounds, in milliseconds.

    python benchmarks/kernel_time.py [--models mobilenet,resnet50] [--repeats 9] [--threads 1] [--gap 50] [--split]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "benchmarks")]

import overhead  # noqa: E402
from selection import selected  # noqa: E402

from torchscan import crawl_module, crawler, operator_cache, operators, tracing  # noqa: E402

#: Seconds since the last reset: inside kernels, and (--split) in crawl's model forward, hook bodies, dispatch,
#: set-up and assembly.
SECONDS = dict.fromkeys(("kernels", "forward", "hooks", "dispatch", "setup", "assembly"), 0.0)


def timed(function: Callable[..., Any], part: str) -> Callable[..., Any]:
    """``function``, adding the time of each call to SECONDS[part]."""
    def timed_call(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            SECONDS[part] += time.perf_counter() - start
    return timed_call


def timed_method(owner: object, name: str, part: str) -> Callable[[], None]:
    """Time every call of ``owner.name`` (a class's method or a module's function) into SECONDS[part]; returns what
    undoes it."""
    original = getattr(owner, name)
    setattr(owner, name, timed(original, part))
    return lambda: setattr(owner, name, original)


def reset() -> None:
    SECONDS.update(dict.fromkeys(SECONDS, 0.0))


class TimedBareMode(overhead.BareMode):
    """overhead.py's bare mode, timing each operator; with a ``gap``, it first idles that many seconds."""

    def __init__(self, gap: float = 0.0) -> None:
        super().__init__()
        self.gap = gap

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.gap:
            end = time.perf_counter() + self.gap
            while time.perf_counter() < end:
                pass
        start = time.perf_counter()
        out = func(*args, **(kwargs or {}))
        SECONDS["kernels"] += time.perf_counter() - start
        return out


def rounds(model: torch.nn.Module, args: tuple, kwargs: dict, repeats: int, gap: float
           ) -> dict[str, tuple[float, float]]:
    """Per variant, the medians of (total, kernel) milliseconds over alternating rounds (after two warm-ups)."""
    def plain() -> None:
        with torch.no_grad():
            model(*args, **kwargs)

    def bare(mode_gap: float = 0.0) -> None:
        with torch.no_grad(), TimedBareMode(mode_gap):
            model(*args, **kwargs)

    variants = {"plain": plain, "bare": bare, "crawl": lambda: crawl_module(model, args=args, kwargs=kwargs)}
    if gap:
        variants["bare + gap"] = lambda: bare(gap)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for round_index in range(repeats + 2):
        for name, run in variants.items():
            reset()
            start = time.perf_counter()
            run()
            total = time.perf_counter() - start
            if round_index >= 2:
                samples[name].append((total, SECONDS["kernels"]))
    return {name: (statistics.median(total for total, _ in rows) * 1e3,
                   statistics.median(kernel for _, kernel in rows) * 1e3) for name, rows in samples.items()}


def own_split(model: torch.nn.Module, args: tuple, kwargs: dict, repeats: int) -> dict[str, float]:
    """Medians (ms) of crawl's time around the model's forward, split into its set-up (the tracer: module walk and
    facts), its assembly (parameter statistics and the report) and the rest (hook and mode entry and exit, the
    root call's two hooks, freeing the analysis state), then its hook bodies and its dispatch mode's work around
    the kernels."""
    undo = [timed_method(tracing.CallTracer, "_pre_hook", "hooks"),
            timed_method(tracing.CallTracer, "_post_hook", "hooks"),
            timed_method(operators.OperatorRecorder, "__torch_dispatch__", "dispatch"),
            timed_method(tracing.CallTracer, "__init__", "setup"),
            timed_method(crawler, "tensor_statistics", "assembly"),
            timed_method(crawler, "_assemble", "assembly")]
    forward = model.forward
    model.forward = timed(forward, "forward")  # this model's own forward only, not its children's
    rows = []
    try:
        for round_index in range(repeats + 2):
            reset()
            start = time.perf_counter()
            crawl_module(model, args=args, kwargs=kwargs)
            total = time.perf_counter() - start
            if round_index >= 2:
                around = total - SECONDS["forward"]
                rows.append({"setup": SECONDS["setup"], "assembly": SECONDS["assembly"],
                             "rest": around - SECONDS["setup"] - SECONDS["assembly"], "hooks": SECONDS["hooks"],
                             "dispatch": SECONDS["dispatch"] - SECONDS["kernels"]})
    finally:
        del model.forward
        for restore in undo:
            restore()
    return {part: statistics.median(row[part] for row in rows) * 1e3 for part in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet18,resnet50,transformer",
                        help="comma-separated parts of model names to keep (default: four CPU models)")
    parser.add_argument("--repeats", type=int, default=9, help="alternating rounds (default 9)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--gap", type=float, default=0.0, help="also a bare mode idling this many us per operator")
    parser.add_argument("--split", action="store_true", help="also where TorchScan's own part runs")
    options = parser.parse_args()
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    run_kernel = operator_cache._runner
    operator_cache._runner = lambda func: timed(run_kernel(func), "kernels")  # the recorder's kernel calls, timed
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), median of {options.repeats} rounds; ms")
    print(f"{'model':<15}{'plain':>8}{'bare':>8}{'kernels':>9}{'crawl':>8}{'kernels':>9}"
          f"{'  = plain':>10}{'+ mode':>8}{'+ slower kernels':>18}{'+ own':>8}"
          + ("  gap kernels" if options.gap else "") + ("  own: set-up, assembly, rest around, hooks, dispatch" if options.split else ""))
    for name in selected(options.models, overhead.CASES):
        torch.manual_seed(0)
        model, args, kwargs = overhead.CASES[name]()
        model.eval()
        row = rounds(model, args, kwargs, options.repeats, options.gap * 1e-6)
        (plain, _), (bare, bare_kernels), (crawl, crawl_kernels) = row["plain"], row["bare"], row["crawl"]
        slower = crawl_kernels - bare_kernels
        line = (f"{name:<15}{plain:>8.1f}{bare:>8.1f}{bare_kernels:>9.1f}{crawl:>8.1f}{crawl_kernels:>9.1f}"
                f"{plain:>10.1f}{bare - plain:>8.1f}{slower:>18.1f}{crawl - bare - slower:>8.1f}")
        if options.gap:
            line += f"{row['bare + gap'][1]:>13.1f}"
        if options.split:
            parts = own_split(model, args, kwargs, options.repeats)
            line += (f"{parts['setup']:>8.1f}{parts['assembly']:>10.1f}{parts['rest']:>6.1f}{parts['hooks']:>13.1f}"
                     f"{parts['dispatch']:>7.1f}")
        print(line)


if __name__ == "__main__":
    main()
