"""Accuracy against published facts (DESIGN.md §5): exact parameter counts, MACs within 0.5 % of the published
GMACs at 224x224 and batch 1, and both views complete under ``strict=True`` on the meta device and on CPU.

torchvision's "GFLOPS" column counts multiply-accumulates, which is why it is compared with MACs here.
"""

from __future__ import annotations

import pytest
import torch
from zoo import bert, gpt2, lstm, mobilenet, resnet, vit

from torchscan import crawl_module
from torchscan.schema import validate_report

IMAGE = (3, 224, 224)
PUBLISHED = {  # factory, parameters, GMACs
    "resnet18": (resnet.resnet18, 11_689_512, 1.814),
    "resnet50": (resnet.resnet50, 25_557_032, 4.089),
    "mobilenet_v2": (mobilenet.mobilenet_v2, 3_504_872, 0.301),
    "vit_b_16": (vit.vit_b_16, 86_567_656, 17.564),
}


def build(factory, device: str) -> torch.nn.Module:
    with torch.device(device):
        return factory()


def assert_complete(report: dict) -> None:
    validate_report(report)
    for name in ("module_flops", "macs", "dmas", "operator_flops"):
        assert report["totals"][name]["status"] == "complete", name
    assert report["operator_flops"]["uncounted"] == []


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_vision_models_match_on_meta(name):
    factory, parameters, gmacs = PUBLISHED[name]
    report = crawl_module(build(factory, "meta"), IMAGE, strict=True)
    assert report["totals"]["parameters"]["total"] == parameters
    macs = report["totals"]["macs"]["value"]
    assert abs(macs / (gmacs * 1e9) - 1) < 0.005, macs
    assert_complete(report)
    # A multiply-add is two FLOPs, and these CNN/ViT operators decompose alike in both views.
    assert report["totals"]["module_flops"]["value"] >= 2 * macs


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "vit_b_16"])
def test_published_vision_models_on_cpu_agree_with_meta(name):
    factory, _parameters, _ = PUBLISHED[name]
    on_cpu = crawl_module(build(factory, "cpu"), IMAGE, strict=True)
    on_meta = crawl_module(build(factory, "meta"), IMAGE, strict=True)
    assert_complete(on_cpu)
    for metric in ("module_flops", "macs", "dmas"):
        assert on_cpu["totals"][metric]["value"] == on_meta["totals"][metric]["value"], metric
    cpu_ops, meta_ops = on_cpu["totals"]["operator_flops"]["value"], on_meta["totals"]["operator_flops"]["value"]
    # ViT's attention takes PyTorch's math path on meta, which scales q and k separately (+ L*E per block).
    assert abs(cpu_ops - meta_ops) / cpu_ops < 1e-4


def test_resnet50_on_cpu_is_complete_and_matches_published_macs():
    report = crawl_module(build(resnet.resnet50, "cpu"), IMAGE, strict=True)
    assert report["totals"]["parameters"]["total"] == 25_557_032
    assert abs(report["totals"]["macs"]["value"] / 4.089e9 - 1) < 0.005


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_bert_base_is_complete(device):
    model = build(bert.bert_base, device)
    args, kwargs = bert.bert_inputs(batch=1, seq_len=128, device=device)
    if device == "meta":
        # Mask values do not exist on meta, so the token receptive field under a padding mask is unknowable.
        kwargs = {key: value for key, value in kwargs.items() if key != "attention_mask"}
    report = crawl_module(model, args=args, kwargs=kwargs, strict=True)
    assert report["totals"]["parameters"]["total"] == 109_482_240
    assert_complete(report)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_gpt2_small_is_complete(device):
    model = build(gpt2.gpt2_small, device)
    args, kwargs = gpt2.gpt2_inputs(batch=1, seq_len=128, device=device)
    report = crawl_module(model, args=args, kwargs=kwargs, strict=True)
    assert report["totals"]["parameters"]["total"] == 124_439_808
    assert_complete(report)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_lstm_classifier_is_complete(device):
    model = build(lstm.lstm_classifier, device)
    args, kwargs = lstm.lstm_inputs(device=device)
    report = crawl_module(model, args=args, kwargs=kwargs, strict=True)
    assert_complete(report)
    assert report["totals"]["macs"]["value"] > 0
