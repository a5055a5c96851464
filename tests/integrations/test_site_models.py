"""The catalog's third-party entries: Hugging Face's own Llama (Llama-2-7B configuration, on ``meta``) and timm's
DeiT-Tiny, both complete under ``strict=True``. Checked here at the catalog's sizes on ``meta``, the Llama at two
of its 32 layers (the catalog build analyzes all of them)."""

from __future__ import annotations

import torch
from third_party_models import import_timm, import_transformers, independent_macs, unique_parameters
from zoo import hf_llama, llama, timm_models

from torchscan import crawl_module


def test_hugging_face_llama_matches_the_plain_pytorch_twin() -> None:
    """The same configuration gives the parameters and the MACs of `zoo.llama`, its torch.nn re-implementation."""
    import_transformers()
    with torch.device("meta"):
        library_model, twin = hf_llama.llama2_7b(num_hidden_layers=2), llama.llama2_7b(num_layers=2)
    (tokens,), _ = llama.llama_inputs(seq_len=16, device="meta")
    report = crawl_module(library_model, args=(tokens,), strict=True)
    reference = crawl_module(twin, args=(tokens,), strict=True)
    assert report["totals"]["parameters"]["total"] == unique_parameters(twin)
    assert report["totals"]["macs"]["value"] == reference["totals"]["macs"]["value"]
    assert report["totals"]["macs"]["value"] == independent_macs(library_model, (tokens,), {})


def test_timm_deit_tiny() -> None:
    import_timm()
    with torch.device("meta"):
        model = timm_models.deit_tiny()
    images = torch.zeros(1, 3, 224, 224, device="meta")
    report = crawl_module(model, args=(images,), strict=True)
    assert report["totals"]["parameters"]["total"] == 5_717_416
    assert report["totals"]["macs"]["value"] == independent_macs(model, (images,), {})
