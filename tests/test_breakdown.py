"""Breakdowns: a handler's parts of its estimate, kept beside it, checked in one place, never added again; the
native attention and Transformer handlers report theirs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchscan import ModuleHandler, crawl_module
from torchscan.breakdown import BreakdownError, validate_breakdown
from torchscan.estimate_memo import EstimateMemo
from torchscan.estimation import CallEstimate
from torchscan.operators import OperatorScope
from torchscan.results import Incomplete, complete, lower_bound, unavailable
from torchscan.schema import validate_report
from torchscan.tracing import CallOutcome


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


def block_handler(breakdown: object) -> ModuleHandler:
    """A subtree owner of MACs (two 4x4 linear layers: 32) that reports ``breakdown`` beside its estimate."""
    return ModuleHandler(lambda call: {"macs": 32, "breakdown": breakdown}, frozenset({"macs"}))


SPLIT = [{"part": "first projection", "module": "first", "macs": 16},
         {"part": "second projection", "module": "second", "macs": 16}]


def test_a_breakdown_is_kept_beside_the_estimate_and_never_added_again() -> None:
    report = crawl_module(nn.Sequential(Block()), (4,), custom_modules={Block: block_handler(SPLIT)})
    validate_report(report)
    owner = report["layers"][1]
    label = owner["metrics"]["macs"]["method"]
    assert owner["breakdown"] == [
        {"part": "first projection", "module": "first", "macs": complete(16, "MACs", "part", label)},
        {"part": "second projection", "module": "second", "macs": complete(16, "MACs", "part", label)}]
    assert report["totals"]["macs"]["value"] == 32  # the owner's estimate once, its parts not again
    assert not [item for item in report["diagnostics"] if item["code"] == "invalid_handler_result"]


@pytest.mark.parametrize(("breakdown", "reason"), [
    ("first", "must be a non-empty list of parts"),
    ([], "must be a non-empty list of parts"),
    ([{"part": "x", "module": "third", "macs": 32}], "must be the dotted path of a submodule"),
    ([{"part": "", "module": "", "macs": 32}], "part must be a non-empty string"),
    ([{"part": "x", "module": "", "macs": 30}], "the parts of macs add up to 30, not to the estimate's 32"),
    ([{"part": "x", "module": "", "macs": 32}, {"part": "y", "module": ""}], "macs is given for 1 of 2 parts"),
    ([{"part": "x", "module": "", "macs": -1}], "must be a finite non-negative number"),
    ([{"part": "x", "module": "", "macs": lower_bound(32, "MACs", "s", "m")}], "macs is complete, so each of its parts"),
    ([{"part": "x", "module": "", "flops": 32}], "unsupported keys ['flops']"),
])
def test_a_breakdown_that_does_not_describe_the_estimate_is_left_out_with_a_diagnostic(breakdown: object,
                                                                                        reason: str) -> None:
    report = crawl_module(nn.Sequential(Block()), (4,), custom_modules={Block: block_handler(breakdown)})
    validate_report(report)
    owner = report["layers"][1]
    assert "breakdown" not in owner and owner["metrics"]["macs"]["value"] == 32  # the estimate itself stands
    (problem,) = [item for item in report["diagnostics"] if item["code"] == "invalid_handler_result"]
    assert reason in problem["message"] and "its breakdown is left out" in problem["message"]
    assert (problem["path"], problem["call_index"]) == ("0", 0)


def test_metrics_an_enclosing_owner_counts_leave_the_parts() -> None:
    parts = [{"part": "a", "module": "first", "macs": 16, "dmas": 1},
             {"part": "b", "module": "second", "macs": 16, "dmas": 2}]
    estimates = {"dmas": complete(3, "DMAs", "subtree", "m")}
    kept = validate_breakdown(parts, estimates, Block(), "m")
    assert [sorted(part) for part in kept] == [["dmas", "module", "part"]] * 2  # macs is not this call's estimate
    assert validate_breakdown(parts, {}, Block(), "m") == []
    with pytest.raises(BreakdownError, match="add up to 3"):
        validate_breakdown(parts, {"dmas": complete(4, "DMAs", "subtree", "m")}, Block(), "m")


def parts_of(report: dict, path: str = "") -> list[dict]:
    return next(layer for layer in report["layers"] if layer["path"] == path)["breakdown"]


def known(parts: list[dict], metric: str) -> int:
    return sum(part[metric]["known_value"] or 0 for part in parts)


def test_native_encoder_layer_parts_add_up_to_its_estimate() -> None:
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    report = crawl_module(layer, args=(torch.randn(2, 8, 16),))
    parts = parts_of(report)
    assert [(part["module"], part["part"]) for part in parts] == [
        ("", "self-attention projections"), ("", "self-attention scores and weighted sum"), ("", "feed-forward"),
        ("", "norms"), ("", "residual additions")]
    estimate = report["layers"][0]["metrics"]
    for metric in ("module_flops", "macs"):
        assert known(parts, metric) == estimate[metric]["value"]
    assert all("dmas" not in part for part in parts)  # attention's intermediates belong to no single part
    # Hand computation, batch 2 x 8 tokens, width 16, feed-forward 32: 4 projections of 16x16 per token, QK^T and
    # weights.V (2 heads x 8 x 8 scores x head width 8), two linear layers 16->32->16.
    macs = {part["part"]: part["macs"]["value"] for part in parts}
    assert macs["self-attention projections"] == 2 * 8 * 4 * 16 * 16
    assert macs["self-attention scores and weighted sum"] == 2 * (2 * 2 * 8 * 8 * 8)
    assert macs["feed-forward"] == 2 * 8 * (16 * 32 + 32 * 16) and macs["norms"] == macs["residual additions"] == 0


def test_stack_and_transformer_parts_are_named_by_layer() -> None:
    block = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, norm_first=True)
    stack = nn.TransformerEncoder(block, 3, norm=nn.LayerNorm(16), enable_nested_tensor=False)
    report = crawl_module(stack, args=(torch.randn(1, 6, 16),))
    parts = parts_of(report)
    assert sorted({part["module"] for part in parts}) == ["layers.0", "layers.1", "layers.2", "norm"]
    assert parts[-1]["part"] == "final norm" and len(parts) == 3 * 5 + 1
    for metric in ("module_flops", "macs"):
        assert known(parts, metric) == report["layers"][0]["metrics"][metric]["value"]
    model = nn.Transformer(16, 2, 1, 2, 32, batch_first=True)
    parts = parts_of(crawl_module(model, args=(torch.randn(1, 6, 16), torch.randn(1, 4, 16))))
    assert {part["module"] for part in parts} == {"encoder.layers.0", "encoder.norm", "decoder.layers.0",
                                                   "decoder.layers.1", "decoder.norm"}
    assert ("decoder.layers.1", "cross-attention projections") in {(part["module"], part["part"]) for part in parts}


def test_a_lower_bound_estimate_has_lower_bound_parts() -> None:
    mha = nn.MultiheadAttention(16, 2, batch_first=True, add_bias_kv=True)
    report = crawl_module(mha, args=(torch.randn(1, 8, 16),) * 3)
    validate_report(report)
    parts = parts_of(report)
    assert [part["part"] for part in parts] == ["attention projections", "attention scores and weighted sum"]
    assert all(part["macs"]["status"] == "partial" for part in parts)
    assert known(parts, "macs") == report["layers"][0]["metrics"]["macs"]["known_value"]


class Scale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_an_inner_owners_parts_go_when_an_enclosing_owner_covers_it() -> None:
    """With a caller registration in the model, inner native layers are estimated speculatively; once the stack's
    inclusive estimate covers them, their parts leave with their estimates (no part is ever counted twice)."""
    block = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(block, 2, enable_nested_tensor=False), Scale())
    scale = ModuleHandler(lambda call: {"module_flops": call.output.numel(), "macs": 0, "dmas": 0})
    report = crawl_module(model, args=(torch.randn(1, 6, 16),), custom_modules={Scale: scale})
    validate_report(report)
    with_parts = [layer["path"] for layer in report["layers"] if "breakdown" in layer]
    assert with_parts == ["0"]
    assert all("metrics" not in layer or "macs" not in layer["metrics"] for layer in report["layers"]
               if layer["path"].startswith("0.layers"))


class OwnNorm(nn.LayerNorm):
    """A LayerNorm whose own forward no built-in formula describes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 1


def test_a_part_the_formulas_cannot_fully_count_is_a_lower_bound_and_the_known_parts_still_add_up() -> None:
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    layer.norm2 = OwnNorm(16)
    report = crawl_module(layer, args=(torch.randn(1, 5, 16),))
    validate_report(report)
    parts = {part["part"]: part for part in parts_of(report)}
    norms = parts["norms"]["module_flops"]  # norm1 counted, norm2's work unknown: a lower bound
    assert norms["status"] == "partial" and norms["known_value"] > 0
    assert parts["feed-forward"]["module_flops"]["status"] == "complete"
    estimate = report["layers"][0]["metrics"]["module_flops"]
    assert estimate["status"] == "partial" and known(list(parts.values()), "module_flops") == estimate["known_value"]


def test_a_handler_may_give_incomplete_parts() -> None:
    parts = [{"part": "a", "module": "first", "macs": Incomplete(10, "the first half is a guess")},
             {"part": "b", "module": "second", "macs": Incomplete()}]
    kept = validate_breakdown(parts, {"macs": lower_bound(10, "MACs", "subtree", "m")}, Block(), "m")
    assert [part["macs"] for part in kept] == [lower_bound(10, "MACs", "part", "m"),
                                               unavailable("MACs", "part", "m")]
    with pytest.raises(BreakdownError, match="known part must be a finite non-negative number"):
        validate_breakdown([{"part": "a", "module": "", "macs": Incomplete(-1)}], {}, Block(), "m")


def test_a_replayed_estimate_has_its_own_parts_and_an_owner_covering_it_leaves_the_others_whole() -> None:
    """Replays copy the stored parts; an enclosing owner that covers a replay's metrics replaces that replay's
    parts, never the stored ones."""
    memo, module = EstimateMemo(), nn.Identity()
    part = {"part": "a", "module": "", "macs": complete(4, "MACs", "part", "m")}
    memo.store("key", module, CallEstimate(metrics={"macs": complete(4, "MACs", "subtree", "m")}, breakdown=[part]))
    first, second = (memo.replay("key", module).copy({"path": path, "call_index": 0}) for path in ("x", "y"))
    assert first.breakdown == second.breakdown == [part] and first.breakdown[0] is not part
    CallOutcome(0, first, {}, OperatorScope()).cover(frozenset({"macs"}), {"path": "", "call_index": 0})
    assert first.breakdown == [] and "macs" not in first.metrics
    assert second.breakdown == [part] and "macs" in second.metrics and part["macs"]["value"] == 4
    assert memo.replay("key", module).breakdown == [part]


def test_a_built_in_fallback_splits_only_the_fields_it_estimated() -> None:
    """A caller supplies the layer's MACs; the built-in formula's parts then describe its FLOPs only (no spurious
    diagnostic about MACs that do not add up to the caller's)."""
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    caller = ModuleHandler(lambda call: {"macs": 7}, frozenset({"macs"}))
    report = crawl_module(layer, args=(torch.randn(1, 5, 16),), custom_modules={nn.TransformerEncoderLayer: caller})
    validate_report(report)
    assert not [item for item in report["diagnostics"] if item["code"] == "invalid_handler_result"]
    parts = parts_of(report)
    assert all("macs" not in part for part in parts)
    assert known(parts, "module_flops") == report["layers"][0]["metrics"]["module_flops"]["value"]


def test_a_callers_parts_stand_beside_its_fields() -> None:
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    caller = ModuleHandler(lambda call: {"macs": 7, "breakdown": [{"part": "all", "module": "", "macs": 7}]},
                           frozenset({"macs"}))
    report = crawl_module(layer, args=(torch.randn(1, 5, 16),), custom_modules={nn.TransformerEncoderLayer: caller})
    assert [(part["part"], part["macs"]["value"]) for part in parts_of(report)] == [("all", 7)]
