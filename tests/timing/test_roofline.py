"""`torchscan.roofline` and `roofline_curve`: bounds by hand, statuses carried through, the layer calls' dtype, and the
Llama decode and prefill points of issue 46 on a small Llama (the 7B figures: benchmarks/roofline_llama.py)."""

from __future__ import annotations

import pytest
import torch
from integrations.third_party_models import import_transformers
from torch import nn
from torchscan_testing import analyze, analyze_call, checked

from torchscan import HARDWARE, cost_curve, crawl_module, decode_step_inputs, roofline, roofline_curve

F32 = 4

#: A device with round numbers: 1000 FLOP/s in float32, 4000 in bfloat16, 100 bytes/s.
TOY = {"name": "toy", "kind": "cpu", "peak_flops": {"float32": 1000.0, "bfloat16": 4000.0},
       "memory_bandwidth": 100.0, "memory_bytes": None, "last_level_cache_bytes": None, "source": "test",
       "notes": ""}


@pytest.fixture(scope="module")
def mlp_report() -> dict:
    return analyze(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (8,))


def test_the_bound_is_the_larger_of_flops_over_peak_and_bytes_over_bandwidth(mlp_report) -> None:
    result = roofline(mlp_report, TOY)
    first = result["layers"][1]["inclusive"]
    # Linear(8, 16) at batch 1: addmm 2*8*16 + 16 bias FLOPs; bytes (16 + 8 + 128 + 16) * 4
    flops, nbytes = 2 * 8 * 16 + 16, (16 + 8 + 128 + 16) * F32
    assert (first["flops"]["value"], first["bytes"]["value"]) == (flops, nbytes)
    assert first["compute_seconds"] == flops / 1000 and first["memory_seconds"] == nbytes / 100
    assert first["bound"] == {"status": "complete", "value": nbytes / 100, "known_value": nbytes / 100,
                              "unit": "seconds", "scope": "inclusive", "method": "roofline_bound"}
    assert first["bound_by"] == "memory" and first["arithmetic_intensity"] == flops / nbytes
    model = result["model"]
    assert model["bytes"]["value"] == (168 + 32 + 88) * F32
    assert model["bound"]["value"] == max(model["flops"]["value"] / 1000, model["bytes"]["value"] / 100)
    assert result["ridge_points"] == {"float32": 10.0, "bfloat16": 40.0}
    assert [row["operator"] for row in result["operators"]] == ["aten.addmm", "aten.relu"]


def test_a_compute_heavy_call_is_compute_bound(mlp_report) -> None:
    fast_memory = {**TOY, "memory_bandwidth": 1e6}
    first = roofline(mlp_report, fast_memory)["layers"][1]["direct"]
    assert first["bound_by"] == "compute" and first["bound"]["value"] == (2 * 8 * 16 + 16) / 1000


def test_tf32_prices_float32_at_the_tensor_core_peak(mlp_report) -> None:
    plain, tf32 = roofline(mlp_report, "A100 SXM 80GB"), roofline(mlp_report, "A100 SXM 80GB", tf32=True)
    assert plain["operators"][0]["peak_flops"] == 19.5e12 and tf32["operators"][0]["peak_flops"] == 156e12


def test_uncounted_flops_make_the_bound_a_lower_bound() -> None:
    class Bessel(nn.Module):
        def forward(self, x):
            return torch.special.bessel_j0(x)

    report = analyze_call(Bessel(), torch.ones(64))
    point = roofline(report, TOY)["model"]
    assert point["flops"]["status"] == "partial" and point["bytes"]["status"] == "complete"
    assert point["bound"]["status"] == "partial" and point["bound"]["known_value"] == 2 * 64 * F32 / 100
    assert point["bound_by"] is None  # the unknown FLOPs could still overtake the bytes
    assert point["arithmetic_intensity"] is None


def test_a_call_computes_in_the_fastest_dtype_of_its_subtree() -> None:
    model = nn.Sequential(nn.Linear(8, 8).bfloat16(), nn.Linear(8, 8).bfloat16())
    report = analyze_call(model, torch.ones(1, 8, dtype=torch.bfloat16))
    result = roofline(report, TOY)
    assert {layer["dtype"] for layer in result["layers"]} == {"bfloat16"}
    assert result["layers"][0]["peak_flops"] == 4000.0
    assert [row["dtype"] for row in result["operators"]] == ["bfloat16"]


def test_errors_name_the_argument_and_the_valid_names(mlp_report) -> None:
    with pytest.raises(ValueError, match=r"hardware 'B300' is not in torchscan.HARDWARE; valid names: 'H100 SXM'"):
        roofline(mlp_report, "B300")
    with pytest.raises(TypeError, match="hardware must be a name"):
        roofline(mlp_report, 3)
    with pytest.raises(ValueError, match=r"hardware\['memory_bandwidth'\]"):
        roofline(mlp_report, {**TOY, "memory_bandwidth": 0})
    with pytest.raises(ValueError, match="mode='structure'"):
        roofline(analyze(nn.Linear(8, 4), (8,), mode="structure"), TOY)


def test_the_bound_curve_is_exact_where_the_flops_and_bytes_curves_are() -> None:
    curve = cost_curve(nn.Linear(8, 4), [1, 2, 3, 4, 5], lambda batch: ((torch.zeros(batch, 8),), {}))
    bounds = roofline_curve(curve, TOY, dtype="float32")
    # addmm(bias 4, input 8b, weight 32) -> out 4b: (36 + 12 b) floats
    assert [point["bytes"]["value"] for point in bounds["points"]] == [(36 + 12 * b) * F32 for b in range(1, 6)]
    assert all(point["exact"] and point["bound_by"] == "memory" for point in bounds["points"])
    assert [point["bound"]["value"] for point in bounds["points"]] == [(36 + 12 * b) * F32 / 100 for b in range(1, 6)]
    assert bounds["curves"]["operator_bytes"]["pieces"][0]["coefficients"] == [str(36 * F32), str(12 * F32)]


# -- issue 46's Llama points, on a small Llama: decode memory-bound at bytes / bandwidth, prefill compute-bound ------


@pytest.fixture(scope="module")
def small_llama() -> nn.Module:
    """One layer of Llama-2-7B's width (so that a 4k prefill is compute-bound), bfloat16, on meta."""
    transformers = import_transformers()
    config = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5504, num_hidden_layers=1,
                                      num_attention_heads=16, num_key_value_heads=16, vocab_size=1000,
                                      max_position_embeddings=8192, attn_implementation="sdpa")
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config).to(torch.bfloat16)


def test_a_llama_decode_step_is_memory_bound_at_its_bytes_over_the_bandwidth(small_llama) -> None:
    llama = small_llama
    args, kwargs = decode_step_inputs(llama, 4096, device="meta")
    report = checked(crawl_module(llama, args=args, kwargs=kwargs))
    device = HARDWARE["A100 SXM 80GB"]
    model = roofline(report, device)["model"]
    assert model["bound"]["status"] == "complete" and model["bound_by"] == "memory"
    assert model["bound"]["value"] == report["totals"]["operator_bytes"]["value"] / device["memory_bandwidth"]
    # every weight but the embedding table (one row looked up) is read, and the whole KV cache
    weights = sum(p.numel() * p.element_size() for p in llama.parameters())
    embedding = llama.model.embed_tokens.weight
    kv_cache = report["inputs"]["kv_cache"]["bytes"]["value"]
    assert model["bytes"]["value"] >= weights - embedding.numel() * embedding.element_size() + kv_cache


def test_a_llama_prefill_is_compute_bound(small_llama) -> None:
    llama = small_llama
    report = analyze_call(llama, torch.zeros(1, 4096, dtype=torch.long, device="meta"))
    model = roofline(report, "A100 SXM 80GB")["model"]
    assert model["bound_by"] == "compute" and model["bound"]["value"] == model["compute_seconds"]
    peaks = {"bfloat16": 312e12, "float32": 19.5e12}  # the norms and rotary embedding run in float32
    rows = report["operator_bytes"]["by_operator"]
    assert model["compute_seconds"] == pytest.approx(
        sum(row["flops"]["value"] / peaks[row["dtype"]] for row in rows if row["flops"]["value"]), rel=1e-12)
