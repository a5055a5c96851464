"""A KV cache the forward's output keeps alive: a Hugging Face causal LM returns its ``DynamicCache`` by default,
and the memory section states its bytes beside the peak; an output without one has no such field."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from integrations.third_party_models import import_transformers
from torch import nn
from torchscan_testing import analyze_call

from torchscan.memory.output_cache import cache_tensors, is_cache

LAYERS, HEADS, KV_HEADS, WIDTH, TOKENS = 2, 4, 2, 32, 8
FLOAT = 4


@pytest.fixture(scope="module")
def llama() -> Any:
    library = import_transformers()
    torch.manual_seed(0)
    config = library.LlamaConfig(vocab_size=64, hidden_size=WIDTH, intermediate_size=64, num_hidden_layers=LAYERS,
                                 num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                                 max_position_embeddings=64)
    return library.LlamaForCausalLM(config).eval()


def test_the_output_cache_of_a_hugging_face_llama_is_stated_beside_the_peak(llama: Any) -> None:
    ids = torch.randint(0, 64, (1, TOKENS))
    kept = analyze_call(llama, ids, memory=True)["memory"]
    plain = analyze_call(llama, ids, kwargs={"use_cache": False}, memory=True)["memory"]
    keys_and_values = LAYERS * 2 * KV_HEADS * TOKENS * (WIDTH // HEADS) * FLOAT
    field = kept["output_cache"]
    assert field["cache_class"] == "DynamicCache"
    assert field["bytes"] == {"status": "complete", "value": keys_and_values, "known_value": keys_and_values,
                              "unit": "bytes", "scope": "model", "method": "traced_live_tensor_bytes"}
    assert field["at_peak"]["value"] == keys_and_values  # every layer's keys and values are live at the peak
    assert "output_cache" not in plain
    assert kept["peak_above_start"]["value"] - plain["peak_above_start"]["value"] <= keys_and_values


class Cache:
    """Stands in for ``transformers.cache_utils.Cache``: recognized by its name and module, never imported."""

    __module__ = "transformers.cache_utils"


class Layer:
    def __init__(self, keys: torch.Tensor) -> None:
        self.keys, self.values = keys, keys * 2


class TinyCache(Cache):
    __module__ = "transformers.cache_utils"

    def __init__(self) -> None:
        self.layers: list[Layer] = []


class Remembering(nn.Module):
    """Returns its output with a cache of its projection, inside a dict inside a tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.project = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        cache = TinyCache()
        cache.layers.append(Layer(self.project(x)))
        return x.sum(), {"past_key_values": cache}


def test_a_cache_is_found_anywhere_in_the_output_by_its_class() -> None:
    memory = analyze_call(Remembering(), torch.randn(3, 4), memory=True)["memory"]
    assert memory["output_cache"]["cache_class"] == "TinyCache"
    assert memory["output_cache"]["bytes"]["value"] == 2 * 3 * 4 * FLOAT  # the keys and the values
    assert not is_cache(Layer(torch.ones(1))) and not is_cache({"layers": []}) and is_cache(TinyCache())
    cache = TinyCache()
    cache.layers.append(Layer(torch.ones(2)))
    assert len(cache_tensors([cache])) == 2
