"""Analysis overhead as a flat profile in Python bytecodes: deterministic, and seconds to run.

``instructions.py`` counts machine instructions exactly but takes minutes per model under callgrind, and names no
Python function. This script traces one analysis (after two warm-up analyses) with ``sys.settrace`` opcode events
and counts the bytecodes each Python function executes itself (callees not included). TorchScan's own work is
almost all Python, so its bytecodes per layer call track its instructions (about 75 machine instructions per
bytecode here) and say where they go. Counts include the model's own Python code (``forward`` methods, PyTorch's
``Module._call_impl``), which a plain forward runs too: compare versions, or functions, not totals with a forward.

Bytecodes say where the Python time goes, not what a change saves: they do not price C-level calls. Replacing a
short Python loop by ``map``, ``itemgetter`` or a ``marshal`` round trip lowers the bytecodes and can raise the
machine instructions (each C-level call builds iterators and objects; a ``marshal`` load allocates every string
again). Confirm every change with ``instructions.py`` before keeping it.

    python benchmarks/bytecodes.py [--models mobilenet,resnet50] [--mode full|structure] [--top 30]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "benchmarks")]

import overhead  # noqa: E402
from selection import selected  # noqa: E402

from torchscan import crawl_module  # noqa: E402

SITE_PACKAGES = str(Path(torch.__file__).parents[1]) + "/"


def function_name(frame: FrameType) -> str:
    code = frame.f_code
    return f"{code.co_filename.replace(str(ROOT) + '/', '').replace(SITE_PACKAGES, '')}:{code.co_firstlineno} " \
           f"{code.co_name}"


def traced_bytecodes(run: Callable[[], Any]) -> Counter[str]:
    """The bytecodes each Python function executes during ``run()``, by ``file:line name``."""
    counts: Counter[str] = Counter()

    def trace(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        frame.f_trace_opcodes = True
        if event == "opcode":
            counts[function_name(frame)] += 1
        return trace

    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(None)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma-separated parts of model names to keep")
    parser.add_argument("--mode", choices=("full", "structure"), default="full", help="crawl_module's mode")
    parser.add_argument("--top", type=int, default=30, help="functions to list per model (default 30)")
    options = parser.parse_args()
    torch.set_num_threads(1)
    for name in selected(options.models, overhead.SMALL_CASES):
        torch.manual_seed(0)
        model, args, kwargs = overhead.SMALL_CASES[name]()
        model.eval()

        def analysis() -> dict[str, Any]:
            return crawl_module(model, args=args, kwargs=kwargs, mode=options.mode)  # noqa: B023 -- called at once

        calls = len(analysis()["layers"])
        analysis()
        counts = traced_bytecodes(analysis)
        own = sum(count for function, count in counts.items() if function.startswith("torchscan/"))
        print(f"{name} ({options.mode}): {calls} layer calls; bytecodes per layer call: "
              f"{sum(counts.values()) / calls:.0f} in all, {own / calls:.0f} in torchscan")
        for function, count in counts.most_common(options.top):
            print(f"{count / calls:>9.1f}  {function}")
        print()


if __name__ == "__main__":
    main()
