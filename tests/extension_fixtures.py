"""Fixtures of the extension-contract tests (spec/extending.txt), and the index of those tests by guide section.

| Section of the guide | Tests |
| --- | --- |
| the end-to-end example; registrations belong to one analysis | ``test_extending_calls.py`` |
| A complete call (the call context) | ``test_extending_calls.py`` |
| Match types and override fields: matching | ``test_extending_calls.py`` |
| Match types and override fields: numbers, None, MetricResult, omission | ``test_extending_precedence.py`` |
| Own an inclusive subtree explicitly; expanded atomic boundaries | ``test_extending_ownership.py`` |
| Partial results, validation, and failure; strict mode | ``test_extending_validation.py`` |
| When callbacks run; Callback scope and limitations | ``test_extending_scope.py`` |
| Operator formulas (``custom_mapping``) | ``test_extending_calls.py`` |
| The guide's own examples, verbatim | ``test_extending_examples.py`` |

Sentences that state the caller's obligations rather than TorchScan's behaviour (treat call objects as read-only,
serialize analyses sharing a model, keep formulas with reports, formulas are theoretical) have no test.

The modules here are tiny. ``Double`` (``x * 2``) has no built-in formula; ``nn.ReLU``, ``nn.LayerNorm`` and
``nn.Linear`` have built-ins, and the native Transformer modules have complete-call built-ins that own their
subtree. Where a test needs an inclusive built-in with known numbers, it asks for the ``atomic_block_builtin``
fixture (``tests/conftest.py``), which registers one for `AtomicBlock` in ``DEFAULT_HANDLERS`` for that test.
"""

from __future__ import annotations

from math import prod
from typing import Any

import pytest
import torch
from torch import nn
from torchscan_testing import OPAQUE, OPAQUE_PACKET, analyze_call, checked

from torchscan import IncompleteAnalysisError, ModuleCall, crawl_module

FIELDS = ("module_flops", "macs", "dmas", "receptive_field", "effective_stride", "effective_padding")
UNITS = {"module_flops": "FLOPs", "macs": "MACs", "dmas": "DMAs", "receptive_field": "elements",
         "effective_stride": "elements", "effective_padding": "elements"}
ROOT = {"path": "", "call_index": 0}


def strict_failure(model: nn.Module, *args: Any, **options: Any) -> dict[str, Any]:
    """The report carried by the IncompleteAnalysisError of a strict analysis on the call ``model(*args)``."""
    with pytest.raises(IncompleteAnalysisError) as caught:
        crawl_module(model, args=args, strict=True, **options)
    return checked(caught.value.report)


def row(report: dict[str, Any], path: str, call_index: int = 0) -> dict[str, Any]:
    (found,) = [layer for layer in report["layers"] if layer["path"] == path and layer["call_index"] == call_index]
    return found


def metric(report: dict[str, Any], path: str, name: str, call_index: int = 0) -> dict[str, Any]:
    return row(report, path, call_index)["metrics"][name]


def diagnostics(report: dict[str, Any], code: str, path: str | None = None) -> list[dict[str, Any]]:
    return [item for item in report["diagnostics"]
            if item["code"] == code and (path is None or item.get("path") == path)]


def label(callback: Any) -> str:
    return f"custom_module_handler:{callback.__module__}.{callback.__qualname__}"


def every_field(flops: float, *, dmas: float | None = None) -> dict[str, Any]:
    """A complete estimate of an elementwise call: all six fields."""
    return {"module_flops": flops, "macs": 0, "dmas": flops if dmas is None else dmas, "receptive_field": 1,
            "effective_stride": 1, "effective_padding": 0}


def elementwise_flops(*input_shapes: Any, out_shape: Any, **kwargs: Any) -> int:
    """Operator formula: one FLOP per output element (shape contract of PyTorch's counter)."""
    return prod(out_shape)


def thousandfold_flops(*input_shapes: Any, out_shape: Any, **kwargs: Any) -> int:
    """Operator formula with a value no built-in gives: 1000 FLOPs per output element."""
    return 1000 * prod(out_shape)


COUNT_MUL = {torch.ops.aten.mul: elementwise_flops}


#: An operator that no FLOP formula and no module-view formula will ever know (so always uncounted).
opaque = OPAQUE_PACKET
OPAQUE_NAME = OPAQUE


class Recorder:
    """A callback that records each ModuleCall it receives and returns a fixed estimate."""

    def __init__(self, estimate: Any = None) -> None:
        self.calls: list[ModuleCall] = []
        self.estimate = estimate if estimate is not None else {}
        self.__qualname__ = "Recorder"

    def __call__(self, call: ModuleCall) -> Any:
        self.calls.append(call)
        return self.estimate(call) if callable(self.estimate) else dict(self.estimate)


# -- fixture modules ------------------------------------------------------------------------------------------------

class Double(nn.Module):
    """An elementwise leaf without a built-in formula: 1 multiply per element."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Opaque(nn.Module):
    """A leaf whose only operator has no FLOP formula."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return opaque(x)


class Scaled(Double):
    pass


class ScaledTwice(Scaled):
    pass


class DoublePair(nn.Module):
    """A composite that does no work itself: two Double children in sequence."""

    def __init__(self, first: nn.Module | None = None) -> None:
        super().__init__()
        self.first = first if first is not None else Double()
        self.second = Double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


class ReluPair(nn.Module):
    """Two built-in ReLU children and no direct work."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.ReLU()
        self.b = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class AtomicBlock(nn.Module):
    """Stands for a built-in atomic block (one with an inclusive complete-call formula): ReLU, Tanh, ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.before = nn.ReLU()
        self.middle = nn.Tanh()
        self.after = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.after(self.middle(self.before(x)))


#: The test built-in for AtomicBlock: inclusive FLOPs and MACs, module-local everything else.
BLOCK_ESTIMATE = {"module_flops": 100, "macs": 10, "dmas": 7, "receptive_field": 1, "effective_stride": 1,
                  "effective_padding": 0}


def relu_builtin(report_x: torch.Tensor) -> dict[str, Any]:
    """The built-in ReLU estimates for one input, read from an analysis without registrations."""
    return analyze_call(nn.ReLU(), report_x)["layers"][0]["metrics"]


X = torch.arange(-3.0, 5.0)  # 8 elements
