"""The extension contract (spec/extending.txt), callback scope and limitations: when callbacks run (once per
completed call, never for a failed forward), in the post-hook under ``no_grad`` without operator counting,
released references, restored state, structure mode, and observed calls only.

Every test names the sentence of the guide (quoted or closely paraphrased) that it proves, so each file reads as
the mapping "sentence -> test"; ``extension_fixtures.py`` indexes the guide's sections by file. Every report
produced here is validated against the shipped schema (``tests/conftest.py``).
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any

import pytest
import torch
from extension_fixtures import (
    COUNT_MUL,
    FIELDS,
    ROOT,
    Double,
    DoublePair,
    Recorder,
    X,
    analyze_call,
    diagnostics,
    every_field,
    metric,
    relu_builtin,
    row,
    strict_failure,
)
from torch import nn

from torchscan import ModuleCall, ModuleHandler, crawl_module

# == When callbacks run =============================================================================================

class Repeat(nn.Module):
    """Calls one child three times with growing inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = Double()

    def forward(self, *inputs):
        return [self.scale(x) for x in inputs]


def test_callback_runs_once_per_completed_call_with_a_new_context_each_time():
    # "Callbacks run at most once per successfully completed matching invocation." "A reused module receives a new
    # call context each time it is estimated."
    callback = Recorder(lambda call: every_field(call.output.numel()))
    report = analyze_call(Repeat(), X[:2], X[:4], X, custom_modules={Double: ModuleHandler(callback)})
    assert len(callback.calls) == 3
    assert len({id(call) for call in callback.calls}) == 3
    assert [call.args[0].shape[0] for call in callback.calls] == [2, 4, 8]
    assert [metric(report, "scale", "module_flops", index)["value"] for index in range(3)] == [2, 4, 8]
    assert report["totals"]["module_flops"]["value"] == 2 + 4 + 8


class Fragile(nn.Module):
    def forward(self, x):
        raise ValueError("refused")


class NothingBack(nn.Module):
    def forward(self, x):
        return None


class Tolerant(nn.Module):
    """Catches its first child's failure and carries on with two more children."""

    def __init__(self) -> None:
        super().__init__()
        self.fragile = Fragile()
        self.nothing = NothingBack()
        self.relu = nn.ReLU()

    def forward(self, x):
        with contextlib.suppress(ValueError):
            self.fragile(x)
        self.nothing(x)
        return self.relu(x)


def test_failed_forward_does_not_invoke_its_callback_and_is_reported():
    # "A failed forward does not invoke its callback. If the enclosing model catches that failure and continues,
    # its row records output kind failed, unavailable estimates, and a module_forward_error diagnostic. Later
    # sibling calls are counted independently. A successfully returned None remains a complete callback output."
    fragile, nothing = Recorder(every_field(0)), Recorder(every_field(0))
    report = analyze_call(Tolerant(), X, custom_modules={Fragile: ModuleHandler(fragile),
                                                    NothingBack: ModuleHandler(nothing)})
    assert fragile.calls == []
    failed = row(report, "fragile")
    assert failed["output"] == {"kind": "failed"}
    assert {name: result["status"] for name, result in failed["metrics"].items()} == dict.fromkeys(
        FIELDS, "unavailable")
    assert [item["path"] for item in diagnostics(report, "module_forward_error")] == ["fragile"]
    (returned_none,) = nothing.calls
    assert returned_none.output is None
    assert row(report, "nothing")["output"] == {"kind": "none"}
    assert all(result["status"] == "complete" for result in row(report, "nothing")["metrics"].values())
    assert row(report, "relu")["metrics"] == relu_builtin(X)
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] == relu_builtin(X)["module_flops"]["value"]


def test_failed_forward_fails_strict_analysis():
    # The failed call's unavailable estimates are incomplete requested analysis.
    report = strict_failure(Tolerant(), X, custom_modules={Fragile: ModuleHandler(lambda call: every_field(0)),
                                                           NothingBack: ModuleHandler(lambda call: every_field(0))})
    assert diagnostics(report, "module_forward_error", "fragile")


def test_partially_covered_callback_gets_the_full_context_but_its_covered_fields_are_ignored():
    # "A partially covered callback receives the full context, but its covered fields are ignored."
    children = Recorder(lambda call: every_field(999))
    report = analyze_call(DoublePair(), X, custom_modules={
        Double: ModuleHandler(children),
        DoublePair: ModuleHandler(lambda call: {"module_flops": 16}, frozenset({"module_flops"}))})
    assert len(children.calls) == 2
    first = children.calls[0]
    assert first.args[0] is X and torch.equal(first.output, X * 2)
    assert "module_flops" not in row(report, "first")["metrics"]
    assert metric(report, "first", "dmas")["value"] == 999
    assert report["totals"]["module_flops"]["value"] == 16


# == Callback scope ==================================================================================================

def test_callbacks_run_in_the_post_hook_under_no_grad_without_operator_counting():
    # "Callbacks execute immediately in the module's post-hook, under torch.no_grad() with operator counting
    # suspended. Tensor operations used for estimation are excluded from measured workload FLOPs."
    seen = []

    def heavy(call: ModuleCall) -> dict[str, Any]:
        seen.append(torch.is_grad_enabled())
        product = torch.mm(torch.ones(16, 16), torch.ones(16, 16))  # 2 * 16^3 FLOPs if it were counted
        return {"module_flops": int(product[0, 0])}

    report = analyze_call(Double(), X, custom_modules={Double: ModuleHandler(heavy)}, custom_mapping=COUNT_MUL)
    assert seen == [False]
    assert metric(report, "", "module_flops")["value"] == 16
    assert report["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 1, "flops": 8}]
    assert report["totals"]["operator_flops"]["value"] == 8


def test_callbacks_run_immediately_after_their_call():
    # "Callbacks execute immediately in the module's post-hook": the first child's estimate exists before the
    # parent's forward moves on to the second child.
    events = []

    class Narrated(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = Double(), Double()

        def forward(self, x):
            x = self.first(x)
            events.append("parent continues")
            return self.second(x)

    def estimate(call: ModuleCall) -> dict[str, Any]:
        events.append(f"estimate {call.module is model.first and 'first' or 'second'}")
        return every_field(8)

    model = Narrated()
    analyze_call(model, X, custom_modules={Double: ModuleHandler(estimate)})
    assert events == ["estimate first", "parent continues", "estimate second"]


def test_the_model_still_executes_once():
    # "The model still executes once."
    class Counted(Double):
        runs = 0

        def forward(self, x):
            Counted.runs += 1
            return x * 2

    analyze_call(Counted(), X, custom_modules={Counted: ModuleHandler(lambda call: every_field(8))})
    assert Counted.runs == 1


def test_temporary_call_references_are_released():
    # "The report retains metadata, not tensor values. TorchScan releases temporary call references after
    # estimation." The call and its output die once crawl_module returns, although the report is still alive.
    references = []

    def observe(call: ModuleCall) -> dict[str, Any]:
        references.extend((weakref.ref(call), weakref.ref(call.output)))
        return every_field(8)

    report = analyze_call(DoublePair(), X, custom_modules={Double: ModuleHandler(observe)})
    assert len(references) == 4
    assert all(reference() is None for reference in references)
    assert report["layers"][1]["output"]["kind"] == "tensor"


def test_activations_retained_by_the_callback_are_the_callers_responsibility():
    # "... retaining an activation in your callback's own state can retain its storage and is your responsibility."
    kept = []
    analyze_call(Double(), X, custom_modules={Double: ModuleHandler(lambda call: kept.append(call.output) or {})})
    assert torch.equal(kept[0], X * 2)


def test_hooks_are_removed_and_training_flags_restored_even_after_errors():
    # "TorchScan removes its hooks and restores every original training flag after analysis, including after
    # errors."
    class Explodes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Double()

        def forward(self, x):
            self.inner(x)
            raise RuntimeError("model failure")

    model = Explodes()
    model.train()
    model.inner.eval()
    with pytest.raises(RuntimeError, match="model failure"):
        crawl_module(model, args=(X,), custom_modules={Double: ModuleHandler(lambda call: every_field(8))})
    assert (model.training, model.inner.training) == (True, False)
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks


def test_structure_mode_runs_neither_handlers_nor_custom_operator_formulas():
    # "mode="structure" runs the forward pass for structural reporting but executes neither module handlers nor
    # custom operator formulas. Compute metrics remain explicitly unrequested."
    runs = {"handler": 0, "formula": 0}

    def handler(call: ModuleCall) -> dict[str, Any]:
        runs["handler"] += 1
        return every_field(8)

    def formula(*shapes: Any, out_shape: Any, **kwargs: Any) -> int:
        runs["formula"] += 1
        return 8

    report = analyze_call(DoublePair(), X, custom_modules={Double: ModuleHandler(handler)},
                     custom_mapping={torch.ops.aten.mul: formula}, mode="structure")
    assert runs == {"handler": 0, "formula": 0}
    assert [layer["path"] for layer in report["layers"]] == ["", "first", "second"]
    for layer in report["layers"]:
        assert {result["status"] for result in layer["metrics"].values()} == {"not_requested"}
    for name in ("module_flops", "macs", "dmas", "operator_flops"):
        assert report["totals"][name]["status"] == "not_requested"
    assert report["context"]["analysis_mode"] == "structure"


def test_raw_and_shape_operator_callbacks_follow_the_installed_counter_contract():
    # "Operator callbacks follow the installed PyTorch counter's contract." Shape callbacks get shapes and
    # out_shape; on this PyTorch, a callback marked _get_raw receives the raw tensors and out_val.
    received = {}

    def shapes(*args: Any, out_shape: Any, **kwargs: Any) -> int:
        received["shape"] = (args[0], out_shape)
        return 1

    def raw(*args: Any, out_val: Any, **kwargs: Any) -> int:
        received["raw"] = (type(args[0]), type(out_val))
        return 2

    raw._get_raw = True  # type: ignore[attr-defined]
    analyze_call(Double(), X, custom_mapping={torch.ops.aten.mul: shapes})
    report = analyze_call(Double(), X, custom_mapping={torch.ops.aten.mul: raw})
    assert tuple(received["shape"][0]) == (8,) and tuple(received["shape"][1]) == (8,)
    assert received["raw"] == (torch.Tensor, torch.Tensor)
    assert report["operator_flops"]["by_operator"] == [{"operator": "aten.mul", "calls": 1, "flops": 2}]


def test_handlers_run_only_for_observed_module_calls():
    # "Handlers run only for observed module calls. Functional operations and fused kernels may use child
    # parameters without invoking a child's forward; a child handler cannot intercept that work."
    class Functional(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(4, 2)

        def forward(self, x):
            return nn.functional.linear(x, self.proj.weight, self.proj.bias)

    callback = Recorder({"macs": 1})
    report = analyze_call(Functional(), torch.ones(1, 4), custom_modules={nn.Linear: ModuleHandler(callback)})
    assert callback.calls == []
    assert [layer["path"] for layer in report["layers"]] == [""]
    assert report["totals"]["parameters"]["total"] == 4 * 2 + 2


def test_native_transformer_handlers_own_their_subtree_while_child_rows_remain():
    # "Native attention and Transformer handlers own their documented estimates across their subtree, while
    # observed child calls remain in the structure."
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)  # batch_first=False: the children are called
    report = analyze_call(layer, torch.ones(3, 1, 8))
    assert row(report, "")["metric_ownership"] == dict.fromkeys(FIELDS, "subtree")
    assert {"self_attn", "norm1", "linear1", "linear2", "norm2"} <= {item["path"] for item in report["layers"]}
    for path in ("self_attn", "norm1", "linear1", "linear2", "norm2"):
        assert row(report, path)["metrics"] == {}
        assert row(report, path)["metric_owners"] == dict.fromkeys(FIELDS, ROOT)
