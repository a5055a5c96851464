"""Fixtures shared by the core tests: analyses that are checked like every report, built-in estimates of one
call, and modules whose work no formula knows.

Imported by name (``from torchscan_testing import ...``): ``tests/conftest.py`` puts this folder on ``sys.path``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchscan import crawl_module
from torchscan.builtin_handlers import builtin_for
from torchscan.handlers import METRIC_FIELDS, ModuleCall, validate_estimates
from torchscan.schema import validate_report

# -- analyses ---------------------------------------------------------------------------------------------------------

#: How many reports ``tests/conftest.py`` validated in this session (a test proves that its check runs).
VALIDATED = {"reports": 0}


def checked(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` after checking it against the shipped schema, that JSON writes it as is, and that it shares no
    list or dict between two places."""
    validate_report(report)
    json.dumps(report)
    assert_nothing_shared(report)
    return report


def shared_containers(value: Any, path: str = "report", seen: dict[int, str] | None = None
                      ) -> list[tuple[str, str]]:
    """Every list or dict of ``value`` reachable from two paths, as ``(first path, second path)`` pairs."""
    seen = {} if seen is None else seen
    if not isinstance(value, (dict, list)):
        return []
    if id(value) in seen:
        return [(seen[id(value)], path)]
    seen[id(value)] = path
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return [pair for key, item in items for pair in shared_containers(item, f"{path}[{key!r}]", seen)]


def assert_nothing_shared(report: dict[str, Any]) -> None:
    """One edit of a report never changes another place of it: no mutable object is reachable from two paths."""
    shared = shared_containers(report)
    assert not shared, f"{len(shared)} shared lists or dicts, first {shared[0][0]} is {shared[0][1]}"


def analyze(model: nn.Module, *positional: Any, **options: Any) -> dict[str, Any]:
    """``crawl_module(model, *positional, **options)``, its report checked (generated inputs: pass shapes)."""
    return checked(crawl_module(model, *positional, **options))


def analyze_call(model: nn.Module, *args: Any, **options: Any) -> dict[str, Any]:
    """``crawl_module`` on the provided call ``model(*args)``, its report checked."""
    return checked(crawl_module(model, args=args, **options))


# -- built-in estimates of one call ----------------------------------------------------------------------------------


def estimate(module: nn.Module, *args: Any, training: bool | None = False, **kwargs: Any) -> dict[str, Any]:
    """Run ``module`` once under ``no_grad`` (in eval like the crawler, in training mode, or as it is with
    ``training=None``), then price that call with its built-in handler, found by the crawler's one lookup.

    Every field comes back as a report reads it: a complete estimate as its number (or per-dimension list), any
    other as the validated MetricResult. The handler must supply all six fields, each valid.
    """
    if training is not None:
        module.train(training)
    with torch.no_grad():
        output = module(*args, **kwargs)
    handler = builtin_for(type(module))
    assert handler is not None, f"no built-in handler for {type(module).__qualname__}"
    validated = validate_estimates(handler.callback(ModuleCall(module, args, kwargs, output)), handler,
                                   builtin=True)
    assert validated.problems == [] and set(validated.metrics) == METRIC_FIELDS, validated
    return {name: result["value"] if result["status"] == "complete" else result
            for name, result in validated.metrics.items()}


def value(result: Any) -> Any:
    """The number of an estimate as `estimate` returns it: the complete number, or a result's ``value``."""
    return result["value"] if isinstance(result, dict) else result


# -- work no formula knows ---------------------------------------------------------------------------------------------


@torch.library.custom_op("torchscan_tests::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    """An operator no formula of TorchScan or PyTorch knows (it copies its input)."""
    return x.clone()


@opaque.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


OPAQUE_PACKET = torch.ops.torchscan_tests.opaque
OPAQUE = "torchscan_tests.opaque"


class OpaqueLeaf(nn.Module):
    """A leaf without a built-in formula that runs only `opaque`: nothing prices its work."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return opaque(x)


class Bessel(nn.Module):
    """A leaf without a built-in formula that runs an operator without any formula: its estimates are lower
    bounds (or unavailable), and its operator FLOPs are uncounted."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


# -- operator FLOPs of a workload ---------------------------------------------------------------------------------


def operator_flops(workload: Any) -> dict[str, Any]:
    """``measure_flops(workload)`` as ``{operator name: FLOPs}`` of its counted operators, after checking that no
    operator went uncounted (the hand computations of the operator formulas read their rows)."""
    from torchscan import measure_flops

    result = measure_flops(workload)
    assert result["uncounted"] == [], result["uncounted"]
    return {row["operator"]: row["flops"] for row in result["by_operator"]}


def backward_flops(forward: Any, *inputs: torch.Tensor) -> dict[str, Any]:
    """`operator_flops` of the backward of ``forward(*inputs)`` against a gradient of ones (the forward runs
    outside the count)."""
    output = forward(*inputs)
    return operator_flops(lambda: output.backward(torch.ones_like(output)))


# -- documentation ---------------------------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[1] / "docs"


def documented_file(page: str, title: str) -> str:
    """The content of the fenced block titled ``title`` (``title="..."`` on its fence) on ``docs/<page>``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    block = text[text.index(f'title="{title}"'):]
    return block[:block.index("\n```\n")]


# -- memory sections (the contract of crawl_module(..., memory=True) and crawl_training_step) -----------------------

#: The method of every traced byte figure, and of the activation count.
MEMORY_METHOD = "traced_live_tensor_bytes"
ACTIVATION_METHOD = "fvcore_activation_count"


def _bytes(value: int, scope: str = "model") -> dict[str, Any]:
    return {"status": "complete", "value": value, "known_value": value, "unit": "bytes", "scope": scope,
            "method": MEMORY_METHOD}


def tensor_bytes(meta: dict[str, Any] | None) -> int:
    """The bytes of the tensors in recorded value metadata (containers summed, anything else 0)."""
    if not meta:
        return 0
    if meta.get("kind") == "tensor":
        count = 1
        for size in meta["shape"]:
            count *= size
        return count * torch.empty((), dtype=getattr(torch, meta["dtype"])).element_size()
    return sum(tensor_bytes(item.get("value", item)) for item in meta.get("items", []))


def with_memory(report: dict[str, Any], device: str = "cpu") -> dict[str, Any]:
    """A copy of ``report`` with hand-made memory sections in the engine's contract: each layer's output bytes are
    those of its recorded output; the peak is reached at the end of the call with the largest output, where the
    activations live are that output and the one before it. A ``training`` section gains its ``memory`` (the site
    report keeps the step's memory there) and ``totals.training_peak_bytes``."""
    copy = json.loads(json.dumps(report))
    outputs = [tensor_bytes(layer.get("output")) for layer in copy["layers"]]
    live = 0
    for layer, output in zip(copy["layers"], outputs, strict=True):
        live = output + (live if layer["depth"] else 0) // 2
        layer["memory"] = {"output_bytes": _bytes(output, "module_call"),
                           "live_bytes_at_end": _bytes(live, "module_call")}
    top = max(range(len(outputs)), key=lambda index: (outputs[index], -index)) if outputs else None
    activations = outputs[top] + (outputs[top - 1] if top else 0) if top is not None else 0
    at_peak = {"parameters": copy["totals"]["parameters"]["bytes"], "buffers": copy["totals"]["buffers"]["bytes"],
               "inputs": sum(tensor_bytes(value) for value in copy["inputs"]["args"]), "activations": activations}
    peak_at = None if top is None else {"path": copy["layers"][top]["path"], "call_index": copy["layers"][top]["call_index"]}
    count = sum(output // 4 for output in outputs)
    copy["memory"] = {
        "method": MEMORY_METHOD, "device": device,
        "attention_kernel": {"name": "none", "reason": "no attention operator ran"},
        "peak": _bytes(sum(at_peak.values())), "peak_above_start": _bytes(activations),
        "at_peak": {name: _bytes(value) for name, value in at_peak.items()},
        "peak_at": {"layer": peak_at, "operator": "aten.addmm", "operator_index": 3},
        "activations": {**_bytes(count), "unit": "activations", "method": ACTIVATION_METHOD},
    }
    copy["totals"]["forward_peak_bytes"] = _bytes(activations)
    copy["totals"]["activations"] = {**_bytes(count), "unit": "activations", "method": ACTIVATION_METHOD}
    if "training" in copy:
        _add_training_memory(copy, at_peak, outputs, device)
    return copy


def _add_training_memory(report: dict[str, Any], forward: dict[str, int], outputs: list[int], device: str) -> None:
    """The step's memory section, the steady state's (AdamW's state resident from the start): gradients as large as
    the parameters, AdamW's two moments, every output saved (``buffers``, which the engine adds to the contract's
    six categories, holds the buffers), no autocast weight copies. The first step peaks in the backward, lower by
    the optimizer state it has not created yet."""
    parameters = forward["parameters"]
    at_peak = {"parameters": parameters, "gradients": parameters, "optimizer_state": 2 * parameters,
               "saved_activations": sum(outputs), "temporaries": max(outputs, default=0),
               "autocast_weight_copies": 0, "inputs": forward["inputs"], "buffers": forward["buffers"]}
    first_at_peak = {**at_peak, "optimizer_state": 0}
    report["training"]["memory"] = {
        "method": MEMORY_METHOD, "device": device,
        "attention_kernel": {"name": "none", "reason": "no attention operator ran"},
        "describes": "steady_state",
        "peak": _bytes(sum(at_peak.values())), "phase_at_peak": "optimizer",
        "at_peak": {name: _bytes(value) for name, value in at_peak.items()},
        "saved_by_layer": [{"path": layer["path"], "call_index": layer["call_index"], "bytes": _bytes(output)}
                           for layer, output in zip(report["layers"], outputs, strict=True) if output and layer["depth"]],
        "peak_operator": "aten._foreach_addcdiv_",
        "first_step": {"peak": _bytes(sum(first_at_peak.values())), "phase_at_peak": "backward",
                       "at_peak": {name: _bytes(value) for name, value in first_at_peak.items()},
                       "peak_operator": "aten.mm",
                       "note": "the first step of a loop: the optimizer creates its state in its step"},
        "resident_at_start": {"optimizer_state": _bytes(2 * parameters), "gradients": _bytes(0)},
        "zero_grad": "set_to_none",
    }
    report["training"]["totals"]["training_peak_bytes"] = _bytes(sum(at_peak.values()))


# -- golden files -----------------------------------------------------------------------------------------------------

#: ``context`` fields that name the machine's torch, Python and TorchScan, not the analysis: placeholders in golden files.
VERSION_FIELDS = ("torchscan", "torch", "python")
#: ``UPDATE_GOLDEN=1 python -m pytest ...`` rewrites the golden files from the current output (then review the diff).
UPDATE_GOLDEN = bool(os.environ.get("UPDATE_GOLDEN"))


def golden_text(report: dict[str, Any]) -> str:
    """The report as golden files hold it: indented JSON, machine versions replaced by placeholders."""
    context = dict(report["context"])
    for key in VERSION_FIELDS:
        context[key] = f"<{key} version>"
    return json.dumps({**report, "context": context}, indent=1) + "\n"
