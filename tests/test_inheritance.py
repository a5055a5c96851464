"""Verified inheritance (`torchscan.inheritance`): a subclass that overrides ``forward`` keeps its parent's leaf
formula exactly when the operators its call ran do the work the formula describes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torchscan_testing import analyze_call

from torchscan.builtin_handlers import DEFAULT_HANDLERS, DESCRIBED_OPERATORS, builtin_for
from torchscan.estimation import CallEstimate
from torchscan.handlers import ModuleCall
from torchscan.inheritance import inherit
from torchscan.operator_check import ThirdPartyHandler, resolves, signature

COUNTS = ("module_flops", "macs")
SPATIAL = ("receptive_field", "effective_stride", "effective_padding")


def x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def ids(*shape: int) -> torch.Tensor:
    return torch.randint(0, 10, shape)


#: One call of (nearly) every built-in leaf formula: a module factory and the arguments of its call.
SAMPLES: list[tuple[Callable[[], nn.Module], Callable[[], tuple]]] = [
    (lambda: nn.Linear(8, 4), lambda: (x(2, 3, 8),)),
    (lambda: nn.Linear(8, 4, bias=False), lambda: (x(2, 8),)),
    (lambda: nn.Identity(), lambda: (x(2, 4),)),
    (lambda: nn.Conv1d(3, 4, 3), lambda: (x(2, 3, 9),)),
    (lambda: nn.Conv2d(3, 4, 3, stride=2, padding=1), lambda: (x(1, 3, 9, 9),)),
    (lambda: nn.Conv3d(2, 4, 3), lambda: (x(1, 2, 5, 5, 5),)),
    (lambda: nn.ConvTranspose2d(3, 4, 3, stride=2), lambda: (x(1, 3, 5, 5),)),
    (lambda: nn.BatchNorm1d(4), lambda: (x(3, 4),)),
    (lambda: nn.BatchNorm2d(4), lambda: (x(2, 4, 3, 3),)),
    (lambda: nn.BatchNorm2d(4).eval(), lambda: (x(2, 4, 3, 3),)),
    (lambda: nn.InstanceNorm1d(4), lambda: (x(2, 4, 5),)),
    (lambda: nn.LayerNorm(6), lambda: (x(2, 3, 6),)),
    (lambda: nn.GroupNorm(2, 4), lambda: (x(2, 4, 3, 3),)),
    (lambda: nn.RMSNorm(6), lambda: (x(2, 3, 6),)),
    (lambda: nn.Embedding(10, 6), lambda: (ids(2, 3),)),
    (lambda: nn.EmbeddingBag(10, 6), lambda: (ids(2, 3),)),
    (lambda: nn.LSTM(4, 5), lambda: (x(3, 2, 4),)),
    (lambda: nn.RNNCell(4, 5), lambda: (x(2, 4),)),
    *[(kind, lambda: (x(2, 4, 3, 3),)) for kind in (
        nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.LeakyReLU, nn.PReLU, nn.ELU, nn.SELU, nn.CELU, nn.Sigmoid, nn.Tanh,
        nn.SiLU, nn.GELU, nn.Mish, nn.Hardswish, nn.Hardsigmoid, nn.Softplus, nn.Softsign, nn.Tanhshrink,
        nn.LogSigmoid, nn.Softmax2d, nn.Flatten)],
    (lambda: nn.GLU(), lambda: (x(2, 4),)),
    (lambda: nn.Threshold(0.1, 0.0), lambda: (x(2, 4),)),
    (lambda: nn.Softmin(dim=1), lambda: (x(2, 4),)),
    (lambda: nn.Dropout().eval(), lambda: (x(2, 4),)),
    (lambda: nn.MaxPool2d(3, stride=2, padding=1), lambda: (x(2, 3, 8, 8),)),
    (lambda: nn.AvgPool1d(2), lambda: (x(2, 3, 8),)),
    (lambda: nn.AdaptiveAvgPool2d(1), lambda: (x(2, 3, 8, 8),)),
    (lambda: nn.AdaptiveMaxPool2d(3), lambda: (x(2, 3, 8, 8),)),
    (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), lambda: (x(1, 2, 4, 4),)),
    (lambda: nn.PixelShuffle(2), lambda: (x(1, 8, 3, 3),)),
    (lambda: nn.ReflectionPad2d(1), lambda: (x(1, 2, 4, 4),)),
]
#: Formulas whose counts the functional operator table prices differently (the GRU gates, the power-average
#: pooling; the bilinear kernel has no functional formula): a subclass cannot prove their work, so it never
#: inherits them complete.
UNVERIFIABLE = [
    (lambda: nn.GRU(4, 5), lambda: (x(3, 2, 4),)),
    (lambda: nn.GRUCell(4, 5), lambda: (x(2, 4),)),
    (lambda: nn.Bilinear(4, 4, 5), lambda: (x(2, 4), x(2, 4))),
    (lambda: nn.LPPool2d(2, 2), lambda: (x(2, 3, 8, 8),)),
]


def same_work_subclass(kind: type[nn.Module]) -> type[nn.Module]:
    """A subclass that overrides ``forward`` with its parent's own."""
    return type(f"Same{kind.__name__}", (kind,), {"forward": lambda self, *args: kind.forward(self, *args)})


def layer(report: dict) -> dict:
    [only] = report["layers"]
    return only


def test_every_builtin_leaf_formula_declares_the_operators_it_describes() -> None:
    leaf_formulas = {kind for kind, handler in DEFAULT_HANDLERS.items() if not handler.subtree_metrics}
    assert set(DESCRIBED_OPERATORS) == leaf_formulas
    unknown = {name for names in DESCRIBED_OPERATORS.values() for name in names if not resolves(name)}
    assert not unknown


def test_each_handler_kind_answers_what_the_estimator_asks_of_it() -> None:
    """What a formula declares, whether it checks it and whether a module with children may use it are asked of the
    handler: a plain built-in declares and checks nothing, a third-party one declares its signature, and an
    inherited one declares its parent's operators, checks them and describes a leaf's work only."""
    linear = nn.Linear(3, 2)
    call = ModuleCall(linear, (torch.ones(1, 3),), {}, linear(torch.ones(1, 3)))
    plain = DEFAULT_HANDLERS[nn.Linear]
    inherited = builtin_for(type("Overrides", (nn.Linear,), {"forward": lambda self, x: nn.Linear.forward(self, x)}))
    third_party = ThirdPartyHandler(lambda call: {}, method="formula:x",
                                    operators=signature("aten.mm", optional=["aten.t"]))
    assert (plain.declared_operators(call), plain.checks_operators, plain.leaves_only) == (None, False, False)
    assert third_party.declared_operators(call) == {"aten.mm", "aten.t"} and not third_party.leaves_only
    assert inherited is not None and inherited.checks_operators and inherited.leaves_only
    assert inherited.declared_operators(call) == frozenset(DESCRIBED_OPERATORS[nn.Linear])
    inherited_third_party = inherit(nn.Linear, third_party, ())
    assert inherited_third_party is not None and inherited_third_party.declared_operators(call) == {"aten.mm", "aten.t"}
    estimate = CallEstimate(metrics={"macs": {"status": "complete", "value": 6, "known_value": 6, "unit": "MACs",
                                              "scope": "module_call", "method": "formula:linear"}})
    plain.verify(call, None, ["macs"], estimate, {})
    assert estimate.metrics["macs"]["status"] == "complete" and not estimate.diagnostics
    inherited.verify(call, None, ["macs"], estimate, {})  # the operators were not observed: not trusted
    assert estimate.metrics["macs"]["status"] == "unavailable"
    assert [item["code"] for item in estimate.diagnostics] == ["handler_signature_mismatch"]


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("make", "arguments"), SAMPLES)
def test_a_subclass_doing_its_parents_work_keeps_the_parents_numbers(make, arguments, device) -> None:
    """On CPU and meta: the declared operators cover every leaf formula's own forward, and the inherited formula
    gives the parent's FLOPs, MACs and receptive fields (DMAs: those of the operators that ran)."""
    torch.manual_seed(0)
    parent = make().to(device)
    args = tuple(argument.to(device) for argument in arguments())
    own = layer(analyze_call(parent, *args))
    parent.__class__ = same_work_subclass(type(parent))
    inherited = analyze_call(parent, *args)
    assert [finding["code"] for finding in inherited["diagnostics"]] == ["verified_inheritance"]
    metrics = layer(inherited)["metrics"]
    for name in (*COUNTS, *SPATIAL):
        assert {**metrics[name], "method": None} == {**own["metrics"][name], "method": None}, name
        assert metrics[name]["method"].startswith("inherited:torch.nn.modules.")
    assert metrics["dmas"]["status"] == own["metrics"]["dmas"]["status"]


@pytest.mark.parametrize(("make", "arguments"), UNVERIFIABLE)
def test_formulas_the_operator_table_prices_otherwise_are_never_inherited_complete(make, arguments) -> None:
    module = make()
    module.__class__ = same_work_subclass(type(module))
    report = analyze_call(module, *arguments())
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert "handler_signature_mismatch" in [finding["code"] for finding in report["diagnostics"]]


class FalconStyleLinear(nn.Linear):
    """``input @ weight.T`` then the bias: ``mm`` and ``add`` for the ``addmm`` the formula describes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x @ self.weight.T
        return out if self.bias is None else out + self.bias


class SamePaddingConv(nn.Conv2d):
    """Pads its input to "same" size, then convolves (timm's ``Conv2dSame``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (0, 1, 0, 1)))


class OffsetPositions(nn.Embedding):
    """Position ids from an attention mask with an offset (OPT's learned positional embedding)."""

    def forward(self, mask: torch.Tensor) -> torch.Tensor:
        positions = (torch.cumsum(mask, dim=1) * mask).long() - 1
        return super().forward(positions + 2)


def test_a_split_bias_add_is_the_addmm_the_linear_formula_describes() -> None:
    report = analyze_call(FalconStyleLinear(8, 4), x(2, 3, 8), strict=True)
    metrics = layer(report)["metrics"]
    assert metrics["macs"]["value"] == 2 * 3 * 8 * 4
    assert metrics["module_flops"]["value"] == 2 * (2 * 3 * 8 * 4) + 2 * 3 * 4  # a multiply and an add per MAC, the bias
    # mm reads 48 + 32 and writes 24; the add reads 24 + 4 and writes 24
    assert metrics["dmas"] == {**metrics["dmas"], "value": 48 + 32 + 24 + 24 + 4 + 24, "method": "functional_ops"}


def test_a_padding_copy_keeps_the_counts_and_drops_the_effective_padding() -> None:
    conv = SamePaddingConv(3, 4, 3, stride=2)
    report = analyze_call(conv, x(1, 3, 9, 9))
    metrics = layer(report)["metrics"]
    assert metrics["macs"]["value"] == 4 * (4 * 4) * (3 * 3 * 3)  # the 10x10 padded input, stride 2: 4x4 outputs
    assert metrics["receptive_field"]["value"] == [3, 3] and metrics["effective_stride"]["value"] == [2, 2]
    assert metrics["effective_padding"]["status"] == "unavailable"
    assert metrics["dmas"]["value"] == (3 * 81 + 3 * 100) + (3 * 100 + 4 * 27 + 4 + 4 * 16)  # the pad, the conv


def test_index_arithmetic_on_position_ids_is_free_and_its_dmas_are_counted() -> None:
    mask = torch.ones(2, 5, dtype=torch.long)
    report = analyze_call(OffsetPositions(10, 6), mask, strict=True)
    metrics = layer(report)["metrics"]
    assert (metrics["module_flops"]["value"], metrics["macs"]["value"]) == (0, 0)
    assert metrics["dmas"]["value"] > 10 * 1 + 10 * 6 + 10 * 6  # the lookup, and the position arithmetic too


def scaled(kind: type[nn.Module]) -> type[nn.Module]:
    """A subclass whose forward multiplies its parent's output by a scale: one more operator with arithmetic."""
    return type(f"Scaled{kind.__name__}", (kind,), {"forward": lambda self, *args: kind.forward(self, *args) * 1.5})


TAMPERED = [
    ("linear", lambda: nn.Linear(8, 4), lambda: (x(2, 8),)),
    ("convolution", lambda: nn.Conv2d(3, 4, 3), lambda: (x(1, 3, 6, 6),)),
    ("embedding", lambda: nn.Embedding(10, 4), lambda: (ids(2, 3),)),
    ("normalization", lambda: nn.LayerNorm(6), lambda: (x(2, 6),)),
    ("activation", lambda: nn.GELU(), lambda: (x(2, 6),)),
    ("pooling", lambda: nn.MaxPool2d(2), lambda: (x(1, 3, 6, 6),)),
]


@pytest.mark.parametrize(("family", "make", "arguments"), TAMPERED, ids=[row[0] for row in TAMPERED])
def test_a_subclass_that_adds_arithmetic_is_partial_and_names_the_operator(family, make, arguments) -> None:
    module = make()
    module.__class__ = scaled(type(module))
    report = analyze_call(module, *arguments())
    assert report["totals"]["module_flops"]["status"] == "partial"
    [finding] = report["diagnostics"]
    assert finding["code"] == "handler_signature_mismatch"
    assert "does not describe aten.mul" in finding["message"]


def test_a_second_bias_add_is_a_mismatch_even_though_add_is_described() -> None:
    class TwoBiases(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.weight.T + self.bias + self.bias

    report = analyze_call(TwoBiases(8, 4), x(2, 8))
    [finding] = report["diagnostics"]
    assert "gives module_flops 136, but the operators the call ran come to 144" in finding["message"]


def test_attention_subclasses_have_their_extra_work_counted_not_dropped() -> None:
    """``nn.MultiheadAttention``'s formula owns its subtree and is never inherited: a subclass's own operators are
    priced one by one, so an extra scale adds exactly its work (no wrong complete from the parent's formula)."""

    class ScaledAttention(nn.MultiheadAttention):
        def forward(self, *args, **kwargs):
            out, weights = super().forward(*args, **kwargs)
            return out * 2, weights

    tokens = x(1, 5, 8)
    torch.manual_seed(0)
    plain = analyze_call(nn.MultiheadAttention(8, 2, batch_first=True), tokens, tokens, tokens)
    torch.manual_seed(0)
    tampered = analyze_call(ScaledAttention(8, 2, batch_first=True), tokens, tokens, tokens)
    assert tampered["totals"]["module_flops"]["value"] == plain["totals"]["module_flops"]["value"] + 5 * 8
    assert tampered["layers"][0]["metrics"]["module_flops"]["method"] != plain["layers"][0]["metrics"][
        "module_flops"]["method"]


def test_caller_registrations_still_match_through_the_mro_without_a_check() -> None:
    from torchscan import ModuleHandler

    report = analyze_call(scaled(nn.Linear)(8, 4), x(2, 8),
                          custom_modules={nn.Linear: ModuleHandler(lambda call: {"macs": 1})})
    macs = layer(report)["metrics"]["macs"]
    assert (macs["status"], macs["value"]) == ("complete", 1) and macs["method"].startswith("custom_module_handler:")


def test_a_subclass_with_child_modules_stays_a_composite_priced_operator_by_operator() -> None:
    """timm's ``BatchNormAct2d`` is a ``BatchNorm2d`` that calls an activation child: the norm's leaf formula would
    describe only part of the call, so none is inherited and the direct work is priced as for any composite."""

    class NormAct(nn.BatchNorm2d):
        def __init__(self, channels: int) -> None:
            super().__init__(channels)
            self.act = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(super().forward(x))

    report = analyze_call(NormAct(4).eval(), x(2, 4, 3, 3), strict=True)
    root = report["layers"][0]
    assert root["metrics"]["module_flops"]["method"] == "functional_ops"
    assert "verified_inheritance" not in [finding["code"] for finding in report["diagnostics"]]


def test_a_cast_is_free_for_the_counts_and_its_dmas_are_counted() -> None:
    """timm's ``Linear`` casts its weight to the input's dtype when scripted; a cast does no arithmetic."""

    class CastingLinear(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.linear(x, self.weight.to(torch.float64).to(x.dtype), self.bias)

    report = analyze_call(CastingLinear(8, 4), x(2, 8), strict=True)
    metrics = layer(report)["metrics"]
    assert (metrics["macs"]["value"], metrics["receptive_field"]["value"]) == (2 * 8 * 4, 1)
    # two casts of the 32-element weight (read and write each), then addmm: 16 + 32 + 4 read, 8 written
    assert metrics["dmas"]["value"] == 2 * (32 + 32) + (16 + 32 + 4 + 8)


def test_a_slice_before_the_work_makes_the_receptive_fields_unavailable() -> None:
    """A strided slice changes which inputs an output sees: the formula's receptive field would be wrong."""

    class EveryOtherRow(nn.Conv2d):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x[:, :, ::2])

    report = analyze_call(EveryOtherRow(3, 4, 3), x(1, 3, 9, 9))
    metrics = layer(report)["metrics"]
    assert metrics["macs"]["status"] == "complete"
    assert {metrics[name]["status"] for name in SPATIAL} == {"unavailable"}
