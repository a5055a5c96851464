"""The code examples of the extension guide (spec/extending.txt), run verbatim.

Each example block of the guide appears below exactly as written: definitions at module level, and each block's
analysis call with its own ``assert`` lines inside the test named after it (the only change is indentation, and
the first block's ``signal`` line stays at module level because the later blocks reuse it). The tests then check
what the guide says about each example beyond its own asserts. When the guide is available beside the checkout,
``test_examples_are_verbatim`` confirms that every line of every example still appears here in order.
"""

# ruff: noqa: I001  (the example's own import block is kept exactly as the guide writes it)
from __future__ import annotations

import re
from pathlib import Path

import pytest

from torchscan import IncompleteAnalysisError
from torchscan.schema import validate_report

# -- block 1: "A complete custom call" (definitions; the analysis is in test_complete_custom_call) -------------

from math import prod

import torch
from torch import nn
from torchscan import ModuleCall, ModuleEstimates, ModuleHandler, crawl_module


class ComplexScale(nn.Module):
    def forward(self, signal, *, gain: complex, tag: str = "example"):
        return {"samples": (signal * gain,), "tag": tag}


def estimate_complex_scale(call: ModuleCall) -> ModuleEstimates:
    # Complete output and kwargs are available, including the non-tensor tag.
    signal = call.args[0] if call.args else call.kwargs["signal"]
    output = call.output["samples"][0]
    assert signal.dtype.is_complex and output.shape == signal.shape
    assert call.output["tag"] == call.kwargs.get("tag", "example")
    assert isinstance(call.kwargs["gain"], complex)
    elements = output.numel()
    return {
        "module_flops": 6 * elements,
        "macs": 0,
        "dmas": 2 * elements,
        "receptive_field": 1,
        "effective_stride": 1,
        "effective_padding": 0,
    }


def complex_mul_flops(*input_shapes, out_shape, **kwargs):
    return 6 * prod(out_shape)


signal = torch.ones(2, 4, dtype=torch.complex64)


def test_complete_custom_call():
    report = crawl_module(
        ComplexScale(),
        args=(signal,),
        kwargs={"gain": 1 + 2j, "tag": "demo"},
        custom_modules={ComplexScale: ModuleHandler(estimate_complex_scale)},
        custom_mapping={torch.ops.aten.mul: complex_mul_flops},
        strict=True,
    )
    assert report["totals"]["module_flops"]["value"] == 48
    assert report["totals"]["operator_flops"]["value"] == 48

    validate_report(report)
    # 2 x 4 complex elements, 6 real FLOPs each; no accumulation; one read and one write per element.
    assert report["totals"]["module_flops"]["value"] == 6 * 2 * 4
    assert report["totals"]["macs"] == {**report["totals"]["macs"], "status": "complete", "value": 0}
    assert report["totals"]["dmas"]["value"] == 2 * 2 * 4
    metrics = report["layers"][0]["metrics"]
    assert (metrics["receptive_field"]["value"], metrics["effective_stride"]["value"],
            metrics["effective_padding"]["value"]) == (1, 1, 0)
    assert metrics["module_flops"]["method"] == f"custom_module_handler:{__name__}.estimate_complex_scale"
    assert report["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 1, "flops": 48}]
    assert report["diagnostics"] == []


# -- block 2: "Own an inclusive subtree explicitly" (definitions; the analysis is in test_complex_pair) ---------

class ComplexPair(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = ComplexScale()
        self.second = ComplexScale()

    def forward(self, signal):
        first = self.first(signal, gain=1 + 2j)["samples"][0]
        return self.second(first, gain=2 + 3j)["samples"][0]


def estimate_pair(call: ModuleCall) -> ModuleEstimates:
    elements = call.output.numel()
    return {"module_flops": 12 * elements, "dmas": 4 * elements}


def test_complex_pair():
    pair_report = crawl_module(
        ComplexPair(),
        args=(signal,),
        custom_modules={
            ComplexScale: ModuleHandler(estimate_complex_scale),
            ComplexPair: ModuleHandler(
                estimate_pair,
                subtree_metrics=frozenset({"module_flops", "dmas"}),
            ),
        },
        custom_mapping={torch.ops.aten.mul: complex_mul_flops},
    )
    assert pair_report["totals"]["module_flops"]["value"] == 96
    assert pair_report["totals"]["macs"]["value"] == 0

    validate_report(pair_report)
    root, first, second = pair_report["layers"]
    # "It owns inclusive FLOPs and DMAs while delegating MACs and receptive-field estimates to the two children."
    assert root["metric_ownership"] == {"module_flops": "subtree", "dmas": "subtree"}
    assert set(root["metrics"]) == {"module_flops", "dmas"}
    assert root["metrics"]["module_flops"]["value"] == 12 * 8
    assert root["metrics"]["dmas"]["value"] == 4 * 8
    for child in (first, second):
        assert set(child["metrics"]) == {"macs", "receptive_field", "effective_stride", "effective_padding"}
        assert child["metric_owners"] == {"module_flops": {"path": "", "call_index": 0},
                                          "dmas": {"path": "", "call_index": 0}}
    # Retained estimates summed once: the children's 2 x 16 DMAs are inside the parent's 32, not added again.
    assert pair_report["totals"]["dmas"]["value"] == 4 * 8
    assert pair_report["totals"]["operator_flops"]["value"] == 2 * 6 * 8


# -- block 3: "Partial results, validation, and failure" -------------------------------------------------------

def lower_bound_scale(call: ModuleCall) -> ModuleEstimates:
    elements = call.output["samples"][0].numel()
    return {
        "module_flops": {
            "status": "partial",
            "value": None,
            "known_value": 4 * elements,
            "unit": "FLOPs",
            "scope": "module_call",
            "method": "complex_real_multiplies_only",
        },
        "macs": 0,
        "dmas": None,
    }


def test_lower_bound_scale():
    report = crawl_module(ComplexScale(), args=(signal,), kwargs={"gain": 1 + 2j},
                          custom_modules={ComplexScale: ModuleHandler(lower_bound_scale)},
                          custom_mapping={torch.ops.aten.mul: complex_mul_flops})
    validate_report(report)
    metrics = report["layers"][0]["metrics"]
    label = f"custom_module_handler:{__name__}.lower_bound_scale"
    # "The four real multiplies are a lower bound ... Missing additions keep the result partial."
    assert metrics["module_flops"] == {"status": "partial", "value": None, "known_value": 4 * 8, "unit": "FLOPs",
                                       "scope": "module_call", "method": f"{label}:complex_real_multiplies_only"}
    assert metrics["macs"] == {"status": "complete", "value": 0, "known_value": 0, "unit": "MACs",
                               "scope": "module_call", "method": label}
    assert metrics["dmas"]["status"] == "unavailable"
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] == 32
    assert report["totals"]["dmas"]["status"] == "unavailable"
    # "TorchScan supplies diagnostics for explicitly incomplete estimates."
    flagged = {(item["code"], item["metric"]) for item in report["diagnostics"]}
    assert {("incomplete_handler_estimate", "module_flops"), ("incomplete_handler_estimate", "dmas")} <= flagged
    with pytest.raises(IncompleteAnalysisError):
        crawl_module(ComplexScale(), args=(signal,), kwargs={"gain": 1 + 2j},
                     custom_modules={ComplexScale: ModuleHandler(lower_bound_scale)},
                     custom_mapping={torch.ops.aten.mul: complex_mul_flops}, strict=True)


# -- the examples stay verbatim ---------------------------------------------------------------------------------

SPEC = Path(__file__).resolve().parents[2] / "shared" / "spec" / "extending.txt"
EXAMPLE_STARTS = ("from math import prod", "class ComplexPair(nn.Module):", "def lower_bound_scale(")
EXAMPLE_END = re.compile(r"^[A-Z][a-z]")  # prose resumes: a sentence starting at column 0


def spec_examples(text: str) -> list[list[str]]:
    """The code lines of each example block of the guide (blank lines dropped)."""
    lines = text.splitlines()
    blocks = []
    for start in EXAMPLE_STARTS:
        index = next(i for i, line in enumerate(lines) if line.startswith(start))
        block = []
        for line in lines[index:]:
            if EXAMPLE_END.match(line):
                break
            if line.strip():
                block.append(line.strip())
        blocks.append(block)
    return blocks


@pytest.mark.skipif(not SPEC.exists(), reason="the extension guide is not beside this checkout")
def test_examples_are_verbatim():
    source = [line.strip() for line in Path(__file__).read_text(encoding="utf-8").splitlines()]
    for block in spec_examples(SPEC.read_text(encoding="utf-8")):
        position = 0
        for line in block:
            assert line in source[position:], f"example line missing or out of order: {line!r}"
            position = source.index(line, position) + 1
