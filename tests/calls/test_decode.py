"""Decode steps with a KV cache: the call generate() makes for one token, and the cache bytes that call reads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from integrations.third_party_models import import_transformers
from torchscan_testing import analyze_call

from torchscan import HARDWARE, cost_curve, decode_step_inputs, roofline
from torchscan.calls.decode import kv_cache_section
from torchscan.curves.schema import validate_cost_curve

LAYERS, HEADS, KV_HEADS, WIDTH = 2, 4, 2, 32


@pytest.fixture(scope="module")
def library() -> Any:
    return import_transformers()


def llama(library: Any, device: str = "cpu", **overrides: Any) -> Any:
    """A Llama with grouped-query attention: 4 query heads share 2 key/value heads of dimension 8."""
    settings = {"vocab_size": 64, "hidden_size": WIDTH, "intermediate_size": 64, "num_hidden_layers": LAYERS,
                "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "max_position_embeddings": 256,
                **overrides}
    with torch.device(device):
        return library.LlamaForCausalLM(library.LlamaConfig(**settings))


def gpt2(library: Any, device: str = "cpu") -> Any:
    config = library.GPT2Config(vocab_size=64, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS, n_positions=256)
    with torch.device(device):
        return library.GPT2LMHeadModel(config)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize(("build", "kv_heads"), [(llama, KV_HEADS), (gpt2, HEADS)], ids=["llama-gqa", "gpt2"])
def test_the_report_states_the_bytes_of_the_context_the_step_reads(library, device, build, kv_heads) -> None:
    model, context, batch = build(library, device), 10, 3
    args, kwargs = decode_step_inputs(model, context, batch_size=batch, device=device)
    report = analyze_call(model, *args, kwargs=kwargs)
    field = report["inputs"]["kv_cache"]
    head_dim, element = WIDTH // HEADS, 4  # float32
    assert field["bytes"]["status"] == "complete"
    assert field["bytes"]["value"] == 2 * LAYERS * batch * kv_heads * head_dim * context * element
    assert (field["layers"], field["batch_size"], field["kv_heads"], field["head_dim"], field["positions"]) == (
        LAYERS, batch, kv_heads, head_dim, context)
    assert field["dtype"] == "float32" and field["reason"] is None
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    assert cache.get_seq_length() == context + 1  # the step appended its own position after it was measured


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_static_cache_is_preallocated_for_the_step_and_its_attention_reads_it_whole(library, device) -> None:
    model, context = llama(library, device), 10
    _, kwargs = decode_step_inputs(model, context, batch_size=3, device=device, cache="static")
    field = analyze_call(model, kwargs=kwargs)["inputs"]["kv_cache"]
    assert field["cache_class"] == "StaticCache" and field["positions"] == context + 1 and field["reason"] is None
    assert field["bytes"]["value"] == 2 * LAYERS * 3 * KV_HEADS * (WIDTH // HEADS) * (context + 1) * 4
    if device == "cpu":  # a meta cache counts its positions in a meta tensor
        assert int(kwargs["cache"].get_seq_length()) == context + 1


def test_a_static_step_moves_the_dynamic_one_less_its_concatenated_copy_of_the_cache(library) -> None:
    """``DynamicCache`` appends with ``torch.cat``: per layer it reads the keys and values it holds and the new
    position's, and writes all of them again; a static cache writes the new position in place."""
    model, context, batch = llama(library, "meta"), 10, 3
    concatenated = {}
    for kind in ("dynamic", "static"):
        _, kwargs = decode_step_inputs(model, context, batch_size=batch, device="meta", cache=kind)
        rows = roofline(analyze_call(model, kwargs=kwargs), HARDWARE["A100 SXM 80GB"])["operators"]
        concatenated[kind] = sum(row["bytes"]["value"] for row in rows if row["operator"] == "aten.cat")
    position = batch * KV_HEADS * (WIDTH // HEADS) * 4
    assert concatenated["dynamic"] - concatenated["static"] == LAYERS * 2 * 2 * (context + 1) * position


def test_the_step_is_the_call_generate_makes(library) -> None:
    model = llama(library)
    _, kwargs = decode_step_inputs(model, 7, batch_size=2)
    assert kwargs["input_ids"].shape == (2, 1) and kwargs["position_ids"].tolist() == [[7], [7]]
    assert "attention_mask" not in kwargs  # generate() drops an all-ones mask
    seen = []
    model.register_forward_pre_hook(lambda module, args, call: seen.append(call), with_kwargs=True)
    model.generate(torch.zeros(2, 7, dtype=torch.long), attention_mask=torch.ones(2, 7, dtype=torch.long),
                   max_new_tokens=2, do_sample=False, pad_token_id=0)
    assert sorted(seen[1]) == sorted(kwargs)


def test_a_sliding_window_cache_has_no_plain_bytes_and_says_why(library) -> None:
    config = library.MistralConfig(vocab_size=64, hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=LAYERS,
                                   num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, sliding_window=4)
    with torch.device("meta"):
        model = library.MistralForCausalLM(config)
    args, kwargs = decode_step_inputs(model, 10, device="meta")
    field = analyze_call(model, *args, kwargs=kwargs)["inputs"]["kv_cache"]
    assert field["bytes"]["status"] == "unavailable" and field["positions"] is None
    assert "sliding-window" in field["reason"] and "DynamicSlidingWindowLayer" in field["reason"]


def test_a_hybrid_cache_has_no_plain_bytes_and_says_why(library) -> None:
    cache = library.DynamicCache()
    cache.layers[:] = [library.cache_utils.DynamicLayer(), library.cache_utils.LinearAttentionLayer()]
    states = torch.zeros(1, 2, 5, 8)
    cache.layers[0].update(states, states)
    field = kv_cache_section((), {"cache": cache})["kv_cache"]
    assert field["bytes"]["status"] == "unavailable" and "layer 1" in field["reason"]


def test_a_call_without_a_cache_has_no_field() -> None:
    assert kv_cache_section((torch.zeros(2),), {"mask": torch.ones(2)}) == {}


def test_decode_macs_are_an_exact_linear_curve_in_the_context(library) -> None:
    model = llama(library, "meta")
    curve = cost_curve(model, [16, 32, 64, 96, 128], lambda size: decode_step_inputs(model, size, device="meta"))
    for name in ("macs", "module_flops", "operator_flops"):
        assert curve["curves"][name]["kind"] == "polynomial", curve["curves"][name]["reason"]
        assert len(curve["curves"][name]["pieces"][0]["coefficients"]) == 2  # linear, with a nonzero slope
        assert curve["curves"][name]["verified_at"]
    per_position = 2 * LAYERS * KV_HEADS * (WIDTH // HEADS) * 4
    assert curve["curves"]["kv_cache"]["pieces"][0]["coefficients"] == ["0", str(per_position)]
    assert [point["kv_cache"]["positions"] for point in curve["points"]] == [16, 32, 64, 96, 128]
    validate_cost_curve(curve)


def test_bad_arguments_are_named(library) -> None:
    with pytest.raises(TypeError, match="causal language model"):
        decode_step_inputs(torch.nn.Linear(2, 2), 4)
    bert = library.BertForMaskedLM(library.BertConfig(vocab_size=64, hidden_size=WIDTH, num_hidden_layers=1,
                                                      num_attention_heads=2, intermediate_size=32))
    with pytest.raises(TypeError, match="got BertForMaskedLM"):
        decode_step_inputs(bert, 4)
    with pytest.raises(ValueError, match="context_length must be an integer >= 0"):
        decode_step_inputs(llama(library, "meta"), -1)
    with pytest.raises(ValueError, match=r"context_length 256: .* max_position_embeddings \(256\)"):
        decode_step_inputs(gpt2(library, "meta"), 256, device="meta")
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        decode_step_inputs(llama(library, "meta"), 4, batch_size=0)
    with pytest.raises(ValueError, match="cache must be one of 'dynamic', 'static', got 'paged'"):
        decode_step_inputs(llama(library, "meta"), 4, cache="paged")


def test_importing_torchscan_and_its_decode_module_does_not_import_transformers() -> None:
    script = ("import sys, torchscan, torchscan.calls.decode, torchscan.crawler\n"
              "torchscan.decode_step_inputs, torchscan.cost_curve\n"
              "print('transformers' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.stdout.strip() == "False"


class _Unreadable:
    """An argument whose attribute lookup raises something other than AttributeError."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} here")


def test_an_argument_that_cannot_be_inspected_is_not_a_cache() -> None:
    assert kv_cache_section((_Unreadable(),), {}) == {}


def test_the_report_schema_checks_the_kv_cache_bytes(library) -> None:
    import jsonschema

    from torchscan.schema import validate_report

    model = llama(library, "meta")
    args, kwargs = decode_step_inputs(model, 4, device="meta")
    report = analyze_call(model, *args, kwargs=kwargs)
    report["inputs"]["kv_cache"]["bytes"]["unit"] = "FLOPs"
    with pytest.raises(jsonschema.ValidationError, match="inputs.kv_cache.bytes: unit must be 'bytes'"):
        validate_report(report)
    report["inputs"]["kv_cache"]["heads"] = 2
    with pytest.raises(jsonschema.ValidationError, match="'heads' was unexpected"):
        validate_report(report)
