"""The code examples of the extension guide (spec/extending.txt), run verbatim from the copies in tests/data/.

The guide's three example blocks are vendored under ``tests/data/extending/``, exactly as the guide writes them,
so that they run on a clean clone of this repository alone. They execute in order in one namespace, as the guide
says ("this example extends the definitions above"), with their own ``assert`` lines; the tests then check what
the guide says about each example beyond those asserts. Where the guide is available beside the checkout
(``../shared/spec/extending.txt``), ``test_the_vendored_examples_are_the_guides`` confirms that the copies still
match it, character for character.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from torchscan import IncompleteAnalysisError, ModuleHandler, crawl_module
from torchscan.schema import validate_report

EXAMPLES = Path(__file__).resolve().parent / "data" / "extending"
GUIDE = Path(__file__).resolve().parents[2] / "shared" / "spec" / "extending.txt"
#: The first line of each example block in the guide, in the order of the vendored files.
EXAMPLE_STARTS = ("from math import prod", "class ComplexPair(nn.Module):", "def lower_bound_scale(")
PROSE = re.compile(r"^[A-Z][a-z]")  # the guide's prose resumes: a sentence starting at column 0
NAMESPACE = "extending_guide"


def vendored_examples() -> list[Path]:
    return sorted(EXAMPLES.glob("*.txt"))


def guide_examples(text: str) -> list[str]:
    """Each example block of the guide, from its first line to the line before the prose resumes."""
    lines = text.splitlines()
    blocks = []
    for start in EXAMPLE_STARTS:
        index = next(i for i, line in enumerate(lines) if line.startswith(start))
        end = next((i for i in range(index, len(lines)) if PROSE.match(lines[i])), len(lines))
        blocks.append("\n".join(lines[index:end]).strip("\n") + "\n")
    return blocks


@pytest.fixture(scope="module")
def guide() -> dict[str, Any]:
    """The namespace of the three examples run in order, each compiled under its own file name."""
    namespace: dict[str, Any] = {"__name__": NAMESPACE}
    for path in vendored_examples():
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # noqa: S102 - our data
    return namespace


def test_the_three_examples_are_vendored():
    assert [path.name for path in vendored_examples()] == [
        "1-complete-custom-call.txt", "2-own-an-inclusive-subtree.txt", "3-partial-results.txt"]


# -- block 1: "A complete custom call" ---------------------------------------------------------------------------

def test_complete_custom_call(guide):
    report = guide["report"]
    validate_report(report)
    # 2 x 4 complex elements, 6 real FLOPs each; no accumulation; one read and one write per element.
    assert report["totals"]["module_flops"]["value"] == 6 * 2 * 4
    assert report["totals"]["macs"] == {**report["totals"]["macs"], "status": "complete", "value": 0}
    assert report["totals"]["dmas"]["value"] == 2 * 2 * 4
    metrics = report["layers"][0]["metrics"]
    assert (metrics["receptive_field"]["value"], metrics["effective_stride"]["value"],
            metrics["effective_padding"]["value"]) == (1, 1, 0)
    assert metrics["module_flops"]["method"] == f"custom_module_handler:{NAMESPACE}.estimate_complex_scale"
    assert report["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 1, "flops": 48}]
    assert report["diagnostics"] == []
    # "The frozen ModuleCall contains ... keyword kwargs": the callback saw the call as written.
    assert report["inputs"]["kwargs"] == [{"key": "gain", "value": {"kind": "scalar", "type": "complex"}},
                                          {"key": "tag", "value": {"kind": "scalar", "type": "str"}}]


# -- block 2: "Own an inclusive subtree explicitly" --------------------------------------------------------------

def test_complex_pair(guide):
    pair_report = guide["pair_report"]
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


# -- block 3: "Partial results, validation, and failure" ---------------------------------------------------------

def analyze_lower_bound(guide: dict[str, Any], **options: Any) -> dict[str, Any]:
    return crawl_module(guide["ComplexScale"](), args=(guide["signal"],), kwargs={"gain": 1 + 2j},
                        custom_modules={guide["ComplexScale"]: ModuleHandler(guide["lower_bound_scale"])},
                        custom_mapping={torch.ops.aten.mul: guide["complex_mul_flops"]}, **options)


def test_lower_bound_scale(guide):
    report = analyze_lower_bound(guide)
    validate_report(report)
    metrics = report["layers"][0]["metrics"]
    label = f"custom_module_handler:{NAMESPACE}.lower_bound_scale"
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
        analyze_lower_bound(guide, strict=True)


# -- the vendored copies stay the guide's ------------------------------------------------------------------------

def test_guide_examples_finds_each_block_up_to_the_prose():
    text = "Intro\n\nfrom math import prod\n\nx = 1\n\nProse.\nclass ComplexPair(nn.Module):\n    pass\n" \
           "Prose again.\ndef lower_bound_scale(call):\n    return {}\n"
    assert guide_examples(text) == ["from math import prod\n\nx = 1\n", "class ComplexPair(nn.Module):\n    pass\n",
                                    "def lower_bound_scale(call):\n    return {}\n"]


@pytest.mark.skipif(not GUIDE.exists(), reason="the extension guide is not beside this checkout")
def test_the_vendored_examples_are_the_guides():
    vendored = [path.read_text(encoding="utf-8") for path in vendored_examples()]
    assert vendored == guide_examples(GUIDE.read_text(encoding="utf-8")), (
        "tests/data/extending/ no longer matches the guide: copy each example block of "
        f"{GUIDE} into its file again (from its first line up to the prose that follows)")
