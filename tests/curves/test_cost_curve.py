"""Cost curves of real analyses: every summable total, exact when the points determine it, and honest when not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from integrations.third_party_models import import_torchvision, import_transformers
from torch import nn
from torchscan_testing import analyze_call, assert_nothing_shared

from torchscan import CURVE_SCHEMA_VERSION, cost_curve, crawl_module, evaluate_piece, fit_curves
from torchscan.curves.schema import validate_cost_curve


def _linear_stack_totals(sizes: list[int]) -> list[dict[str, Any]]:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return [analyze_call(model, torch.zeros(size, 8))["totals"] for size in sizes]


def test_every_total_gets_a_curve_under_its_name() -> None:
    sizes = [1, 2, 3, 5, 8]
    curves = fit_curves(sizes, _linear_stack_totals(sizes))
    assert {"module_flops", "macs", "dmas", "operator_flops", "parameters.total", "parameters.bytes",
            "buffers.total"} <= set(curves)
    assert curves["parameters.total"]["pieces"][0]["coefficients"] == [str(8 * 16 + 16 + 16 * 4 + 4)]
    assert curves["macs"]["pieces"][0]["coefficients"] == ["0", str(8 * 16 + 16 * 4)]
    assert all(curve["kind"] == "polynomial" for curve in curves.values())


def test_a_partial_total_is_a_lower_bound_and_gets_no_curve() -> None:
    sizes = [1, 2, 3, 4]
    totals = _linear_stack_totals(sizes)
    totals[2]["macs"] = {**totals[2]["macs"], "status": "partial", "value": None}
    curve = fit_curves(sizes, totals)["macs"]
    assert curve["kind"] == "points" and curve["pieces"] == []
    assert "partial at size 3" in curve["reason"] and "lower bound" in curve["reason"]


def test_fit_curves_names_what_is_wrong_with_its_arguments() -> None:
    with pytest.raises(ValueError, match="one report's totals per size"):
        fit_curves([1, 2], [{}])
    with pytest.raises(ValueError, match="distinct"):
        fit_curves([1, 1], [{}, {}])
    with pytest.raises(TypeError, match="sizes must be"):
        fit_curves([1.5], [{}])


def test_cost_curve_analyzes_each_size_and_is_json() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
    curve = cost_curve(model, [8, 16, 24, 32, 40], lambda size: ((torch.zeros(1, 3, size, size),), {}))
    assert curve["schema_version"] == CURVE_SCHEMA_VERSION and curve["sizes"] == [8, 16, 24, 32, 40]
    assert [point["size"] for point in curve["points"]] == curve["sizes"]
    assert curve["curves"]["macs"]["pieces"] == [{"from": 8, "to": 40, "step": 8,
                                                  "coefficients": ["0", "0", str(3 * 4 * 9)]}]
    assert json.loads(json.dumps(curve)) == curve
    assert_nothing_shared(curve)


def test_cost_curve_refuses_inputs_that_are_not_a_call() -> None:
    with pytest.raises(TypeError, match=r"inputs\(4\) must return an \(args, kwargs\) pair"):
        cost_curve(nn.ReLU(), [4], lambda size: torch.zeros(size))


def test_the_package_exports_the_function_from_its_curves_module() -> None:
    import torchscan
    from torchscan.curves import cost_curve as module

    assert torchscan.cost_curve is module.cost_curve and torchscan.fit_curves is module.fit_curves


# -- real models: transformers are quadratic in the sequence length, convolutional networks only per stride class --

EXACT_VIEWS = ("macs", "module_flops", "operator_flops")


def _token_call(device: str = "meta") -> Any:
    return lambda length: ((), {"input_ids": torch.zeros(1, length, dtype=torch.long, device=device)})


def _language_models() -> dict[str, Any]:
    library = import_transformers()
    with torch.device("meta"):
        return {
            "gpt2": library.GPT2LMHeadModel(library.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=4,
                                                               n_positions=256)),
            "llama": library.LlamaForCausalLM(library.LlamaConfig(
                vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256)),
        }


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_transformer_costs_are_exact_quadratics_in_the_sequence_length(name: str) -> None:
    model = _language_models()[name]
    curve = cost_curve(model, [16, 32, 64, 128, 256], _token_call())
    validate_cost_curve(curve)
    direct = crawl_module(model, kwargs=_token_call()(80)[1])["totals"]  # 80 is on the lattice, not sampled
    for view in EXACT_VIEWS:
        fitted = curve["curves"][view]
        assert fitted["kind"] == "polynomial", fitted["reason"]
        (piece,) = fitted["pieces"]
        assert (piece["from"], piece["to"], piece["step"], len(piece["coefficients"])) == (16, 256, 16, 3)
        assert fitted["verified_at"] == [128, 256]
        assert evaluate_piece(piece, 80) == direct[view]["value"]


def _resnet18() -> nn.Module:
    with torch.device("meta"):
        return import_torchvision().models.resnet18()


def _image_call(size: int) -> tuple[tuple, dict[str, Any]]:
    return (torch.empty(1, 3, size, size, device="meta"),), {}


def _held_out_agree(sizes: list[int], held_out: list[int]) -> dict[str, dict[str, Any]]:
    """The curves of ResNet-18 at ``sizes``, after checking every piece against direct analyses of the held-out
    sizes that lie on its lattice."""
    model = _resnet18()
    curve = cost_curve(model, sizes, _image_call)
    validate_cost_curve(curve)
    curves = curve["curves"]
    for size in held_out:
        totals = crawl_module(model, args=_image_call(size)[0])["totals"]
        for view in EXACT_VIEWS:
            for piece in curves[view]["pieces"]:
                if piece["from"] <= size <= piece["to"] and (size - piece["from"]) % piece["step"] == 0:
                    assert evaluate_piece(piece, size) == totals[view]["value"], (view, size, piece)
    return curves


def test_a_resnet_off_its_stride_gets_no_curve_that_a_direct_analysis_contradicts() -> None:
    held_out = [208, 224, 232]
    curves = _held_out_agree([s for s in range(200, 241, 4) if s not in held_out], held_out)
    assert all(curves[view]["kind"] != "polynomial" for view in EXACT_VIEWS)


def test_a_resnet_at_multiples_of_its_stride_is_an_exact_quadratic() -> None:
    curves = _held_out_agree([128, 160, 192, 256, 320, 384], [224, 288])
    for view in EXACT_VIEWS:
        assert curves[view]["kind"] == "polynomial", curves[view]["reason"]
        assert curves[view]["pieces"][0]["step"] == 32 and len(curves[view]["pieces"][0]["coefficients"]) == 3


def test_cost_curve_puts_the_call_on_the_device() -> None:
    with torch.device("meta"):
        model = nn.Linear(4, 2)
    curve = cost_curve(model, [1, 2, 3, 4], lambda batch: ((), {"input": torch.zeros(batch, 4)}), device="meta")
    assert curve["curves"]["macs"]["pieces"][0]["coefficients"] == ["0", "8"]
    with pytest.raises(ValueError, match="device must be"):
        cost_curve(model, [1], lambda batch: ((), {}), device="no-such-device")


def test_a_structure_sweep_has_parameter_curves_and_says_why_it_has_no_cost_curves() -> None:
    curve = cost_curve(nn.Linear(4, 2), [1, 2, 3], lambda batch: ((torch.zeros(batch, 4),), {}), mode="structure")
    assert curve["curves"]["parameters.total"]["kind"] == "polynomial"
    assert curve["curves"]["macs"] == {"kind": "points", "pieces": [], "verified_at": [],
                                       "reason": "not_requested at size 1: the analysis mode did not count it"}


def test_fitting_curves_does_not_import_torch() -> None:
    """The site builder fits and displays curves of cached sweeps without paying for importing torch."""
    script = ("import sys\nfrom torchscan.curves.cost_curve import CURVE_SCHEMA_VERSION, evaluate_piece, fit_curves\n"
              "import torchscan\ntorchscan.fit_curves, torchscan.evaluate_piece\nprint('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.stdout.strip() == "False"
