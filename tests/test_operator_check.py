"""The operator check: a third-party formula is trusted for a call only while the operators that call ran directly
match the ones the formula describes; otherwise its counts are lower bounds from the observed operators, its
receptive fields unavailable, and a ``handler_signature_mismatch`` diagnostic says what differed."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchscan import IncompleteAnalysisError, ModuleHandler, crawl_module
from torchscan.diagnostics import CODES
from torchscan.operator_check import (
    ALLOWED_ANYWHERE,
    OperatorSignature,
    ThirdPartyHandler,
    compare,
    signature,
)

DEVICES = ("cpu", "meta")


def silu_class(forward):
    """A class the lookup takes for transformers' ``SiLUActivation`` (declared: one ``aten.silu``)."""
    return type("SiLUActivation", (nn.Module,), {"__module__": "transformers.activations",
                                                 "__qualname__": "SiLUActivation", "forward": forward})


def plain_silu(self, x):
    return nn.functional.silu(x)


def silu_and_matmuls(self, x):
    """A changed forward: the activation, then two square matmuls the formula knows nothing about."""
    x = nn.functional.silu(x)
    return x @ x.transpose(-1, -2) @ x


def layer(report, path):
    return next(row for row in report["layers"] if row["path"] == path)


def test_signature_counts_each_name_and_validates_names_and_counts() -> None:
    assert signature("aten.mul", "aten.mul", "aten.add").required == {"aten.add": 1, "aten.mul": 2}
    assert signature("aten.add", optional=("aten.clone",)).describe() == "aten.add (optional: aten.clone)"
    assert signature().describe() == "no operator"
    with pytest.raises(ValueError, match="aten.not_an_operator"):
        signature("aten.not_an_operator")
    with pytest.raises(ValueError, match="positive integer"):
        OperatorSignature({"aten.mul": 0})


def test_third_party_handlers_are_built_in_formulas_with_declared_operators() -> None:
    with pytest.raises(ValueError, match="method label"):
        ThirdPartyHandler(lambda call: {}, operators=signature())
    with pytest.raises(TypeError, match="OperatorSignature"):
        ThirdPartyHandler(lambda call: {}, method="formula:x", operators=["aten.mul"])
    assert issubclass(ThirdPartyHandler, ModuleHandler)


def test_compare_reports_unexpected_and_missing_operators_and_allows_views_and_casts() -> None:
    declared = signature("aten.mul", "aten.mul", "aten.add", optional=("aten.clone",))
    observed = {"aten.mul": 3, "aten.view": 4, "aten._to_copy": 2, "aten.clone": 5, "aten.permute": 1, "aten.mm": 1}
    assert compare(declared, observed) == ({"aten.mm": 1, "aten.mul": 1}, {"aten.add": 1})
    assert compare(declared, {"aten.mul": 2, "aten.add": 1, "aten.transpose": 2}) == ({}, {})
    assert {"aten.view", "aten.permute", "aten.slice", "aten.expand", "aten._to_copy"} <= ALLOWED_ANYWHERE
    assert not {"aten.clone", "aten.cat", "aten.mul", "aten.index"} & ALLOWED_ANYWHERE


@pytest.mark.parametrize("device", DEVICES)
def test_a_matching_call_is_complete(device: str) -> None:
    model = nn.Sequential(nn.Linear(6, 6), silu_class(plain_silu)()).to(device)
    report = crawl_module(model, (4, 6), device=device, strict=True)
    assert layer(report, "1")["metrics"]["module_flops"]["value"] == 5 * 24
    assert "handler_signature_mismatch" not in {item["code"] for item in report["diagnostics"]}


@pytest.mark.parametrize("device", DEVICES)
def test_extra_matmuls_make_the_call_partial_with_the_observed_lower_bound(device: str) -> None:
    model = nn.Sequential(nn.Linear(6, 6), silu_class(silu_and_matmuls)()).to(device)
    with pytest.raises(IncompleteAnalysisError) as raised:
        crawl_module(model, (4, 6), device=device, strict=True)
    report = raised.value.report
    metrics = layer(report, "1")["metrics"]
    # Observed directly: silu (5 FLOPs per element), a (4x6)(6x4) and a (4x4)(4x6) matmul.
    matmul_macs = 4 * 6 * 4 + 4 * 4 * 6
    assert metrics["macs"] == {"status": "partial", "value": None, "known_value": matmul_macs, "unit": "MACs",
                               "scope": "module_call", "method": "handler_signature_mismatch"}
    assert metrics["module_flops"]["known_value"] == 5 * 24 + 2 * matmul_macs
    assert metrics["receptive_field"]["status"] == "unavailable"
    assert report["totals"]["macs"]["status"] == "partial"
    assert report["totals"]["macs"]["known_value"] == 4 * 36 + matmul_macs
    [mismatch] = [item for item in report["diagnostics"] if item["code"] == "handler_signature_mismatch"]
    assert mismatch["path"] == "1" and mismatch["severity"] == "error"  # a matmul is significant work
    assert "transformers.activations.SiLUActivation describes aten.silu" in mismatch["message"]
    assert "it also ran aten.bmm x2" in mismatch["message"]


def test_missing_operators_are_a_mismatch_too() -> None:
    model = nn.Sequential(nn.Linear(6, 6), silu_class(lambda self, x: x.relu())())
    report = crawl_module(model, (6,))
    [mismatch] = [item for item in report["diagnostics"] if item["code"] == "handler_signature_mismatch"]
    assert mismatch["severity"] == "warning"
    assert "it also ran aten.relu; it did not run aten.silu" in mismatch["message"]
    assert layer(report, "1")["metrics"]["module_flops"] == {
        "status": "partial", "value": None, "known_value": 6, "unit": "FLOPs", "scope": "module_call",
        "method": "handler_signature_mismatch"}


def test_a_caller_handler_is_never_second_guessed() -> None:
    """The check guards built-in formulas: fields a caller supplies stay as the caller said."""
    silu = silu_class(silu_and_matmuls)
    caller = ModuleHandler(lambda call: {"module_flops": 7, "macs": 3, "dmas": 2, "receptive_field": 1,
                                         "effective_stride": 1, "effective_padding": 0})
    report = crawl_module(nn.Sequential(silu()), (4, 6), custom_modules={silu: caller}, strict=True)
    assert layer(report, "0")["metrics"]["macs"]["value"] == 3
    assert not any(item["code"] == "handler_signature_mismatch" for item in report["diagnostics"])


def test_the_diagnostic_is_documented_once() -> None:
    severity, sentence = CODES["handler_signature_mismatch"]
    assert severity == "warning" and sentence.endswith(".")


def test_monkeypatched_transformers_rms_norm_is_partial_never_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real library class whose forward changed (here: extra matmuls) loses its formula's trust, on any device."""
    from third_party_models import import_transformers

    llama = import_transformers().models.llama.modeling_llama
    original = llama.LlamaRMSNorm.forward

    def changed(self, hidden_states):
        mixed = hidden_states @ hidden_states.transpose(-1, -2) @ hidden_states
        return original(self, mixed)

    monkeypatch.setattr(llama.LlamaRMSNorm, "forward", changed)
    for device in DEVICES:
        with torch.device(device):
            model = nn.Sequential(llama.LlamaRMSNorm(8))
        report = crawl_module(model, (5, 8), device=device)
        metrics = layer(report, "0")["metrics"]
        assert {result["status"] for result in metrics.values()} == {"partial", "unavailable"}
        assert metrics["macs"]["known_value"] == 5 * 8 * 5 + 5 * 5 * 8
        assert report["totals"]["macs"]["status"] == "partial"
        [mismatch] = [item for item in report["diagnostics"] if item["code"] == "handler_signature_mismatch"]
        assert "modeling_llama.LlamaRMSNorm" in mismatch["message"] and "aten.bmm x2" in mismatch["message"]


def test_a_declaration_that_cannot_describe_the_call_is_not_trusted() -> None:
    """transformers' GELUActivation declares its operators from its ``act`` attribute; without one, neither the
    formula nor the declaration can describe the call."""
    klass = type("GELUActivation", (nn.Module,), {"__module__": "transformers.activations",
                                                  "__qualname__": "GELUActivation",
                                                  "forward": lambda self, x: nn.functional.gelu(x)})
    report = crawl_module(nn.Sequential(klass()), (6,))
    assert layer(report, "0")["metrics"]["module_flops"]["status"] == "partial"
    [mismatch] = [item for item in report["diagnostics"] if item["code"] == "handler_signature_mismatch"]
    assert "cannot say which operators this call should run (AttributeError)" in mismatch["message"]
