"""The training-step memory analysis beside the measured reference of a real loop's first and steady steps.

Run from the repository root: ``python benchmarks/steady_state_reference.py [--models gpt2,llama] [--onednn]``. For each reference model
of ``tests/torchscan_testing.py`` (``REFERENCE_MODELS``: ResNet-18, BERT, GPT-2 and Llama, small, random weights) in
float32 and under bfloat16 autocast, with AdamW, it prints:

* ``steady`` and ``first``: ``crawl_training_step(..., optimizer="adamw", memory=True)["training"]["memory"]``'s
  ``peak`` (the steady-state step's absolute peak: parameters, buffers, inputs, gradients, optimizer state,
  activations, temporaries) with its ``phase_at_peak``, and ``first_step.peak``. For bf16 the call runs inside
  ``torch.autocast("cpu", ...)`` (the analysis then follows PyTorch's AMP recipe, as the loop does);
* ``measured 1`` and ``measured 3``: `measured_step_peaks`, the absolute peaks of the first and third (steady) step
  of a real loop, and the same steps as PyTorch's ``MemTracker`` counts them;
* the steady state's relative error against the measured third step, the first step's against the measured first,
  and the differences in bytes from MemTracker's;

then the analysis's categories at its peak. The steps run with oneDNN off, as the reference does by default (its
convolution backward holds a thread-dependent scratch no trace sees); ``--onednn`` runs analysis and loops with it
on. Each row prints when its model is done. Sizes in MiB.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "tests")]

from torchscan_testing import (  # noqa: E402
    REFERENCE_MODELS,
    measured_step_peaks,
    onednn_enabled,
)

from torchscan import crawl_training_step  # noqa: E402

MIB = 2**20
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}
COLUMNS = ("model", "precision", "steady", "phase", "measured 3", "error", "first", "measured 1", "error",
           "steady - MemTracker 3 (bytes)", "first - MemTracker 1 (bytes)")


def adamw(parameters: list[torch.Tensor]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters)


def analysis(name: str, dtype: torch.dtype | None) -> dict[str, Any]:
    """The ``training.memory`` section of the model's step, under autocast when ``dtype`` is given."""
    model, args, kwargs, loss = REFERENCE_MODELS[name]()
    context = torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()
    with context:
        report = crawl_training_step(model, args=args, kwargs=kwargs, loss=loss, optimizer="adamw", memory=True)
    return report["training"]["memory"]


def row(name: str, precision: str, onednn: bool) -> tuple[list[str], dict[str, int]]:
    """One table row (cells) and the analysis's categories at its peak, in bytes."""
    dtype = PRECISIONS[precision]
    with onednn_enabled(onednn):
        memory = analysis(name, dtype)
    model, args, kwargs, loss = REFERENCE_MODELS[name]()
    measured, tracked = measured_step_peaks(model, args, kwargs, loss, adamw, autocast_dtype=dtype, onednn=onednn)
    steady, first = memory["peak"]["value"], memory["first_step"]["peak"]["value"]
    cells = [name, precision, mib(steady), memory["phase_at_peak"], mib(measured[2]), error(steady, measured[2]),
             mib(first), mib(measured[0]), error(first, measured[0]), f"{steady - tracked[2]:+,}",
             f"{first - tracked[0]:+,}"]
    return cells, {category: result["value"] for category, result in memory["at_peak"].items()}


def mib(value: int) -> str:
    return f"{value / MIB:.2f}"


def error(value: int, reference: int) -> str:
    return f"{100 * (value - reference) / reference:+.2f} %"


def markdown_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(REFERENCE_MODELS), help="comma-separated names to run")
    parser.add_argument("--onednn", action="store_true", help="run the analysis and the loops with oneDNN on")
    options = parser.parse_args()
    chosen = [name for name in REFERENCE_MODELS if name in options.models.split(",")]
    warnings.simplefilter("ignore")
    print(markdown_row(list(COLUMNS)))
    print(markdown_row(["---"] * len(COLUMNS)))
    categories = []
    for name in chosen:
        for precision in PRECISIONS:
            cells, at_peak = row(name, precision, options.onednn)
            print(markdown_row(cells), flush=True)
            categories.append((f"{name} {precision}", at_peak))
    print()
    names = list(dict.fromkeys(category for _, at_peak in categories for category in at_peak))
    print(markdown_row(["analysis at its peak (MiB)", *names]))
    print(markdown_row(["---"] * (len(names) + 1)))
    for label, at_peak in categories:
        print(markdown_row([label, *(mib(at_peak[name]) if name in at_peak else "" for name in names)]))


if __name__ == "__main__":
    main()
