"""``as_device``: an analysis on fake-tensor stand-ins of a device keeps that device's kernel choices without
allocating, so a model on ``meta`` analyzed ``as_device="cpu"`` reports what the same model's real CPU trace reports
(where meta's own kernels differ: fused attention, batch normalization and max pooling in evaluation mode), and the
model is left exactly as it was."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from integrations.third_party_models import import_torchvision, import_transformers
from torch import nn
from torch.nn import functional
from torchscan_testing import analyze_call, checked

from torchscan import cost_curve, crawl_module, crawl_training_step, summary
from torchscan.calls.stand_ins import KIND, DeviceQueries, stand_in_device

STAND_INS = {"kind": KIND, "device": "cpu", "model_devices": ["meta"]}


class SelfAttention(nn.Module):
    """One attention block calling ``scaled_dot_product_attention``: fused on CPU, the math path on meta."""

    def __init__(self, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, length, width = tokens.shape
        query, key, value = self.qkv(tokens).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = functional.scaled_dot_product_attention(query, key, value)
        return self.out(attended.transpose(1, 2).reshape(batch, length, width))


def on_meta(build: Any) -> nn.Module:
    with torch.device("meta"):
        return build()


def without_stand_ins(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` as an analysis without stand-ins words it: no ``stand_ins`` fields, the kernel reason alone."""
    report = copy.deepcopy(report)
    assert report["context"].pop("stand_ins") == STAND_INS
    for memory in (report.get("memory"), report.get("training", {}).get("memory")):
        if memory is not None:
            assert memory.pop("stand_ins") == STAND_INS
            reason, _, note = memory["attention_kernel"]["reason"].partition("; traced on fake-tensor stand-ins")
            assert note == " on cpu, which keep the kernel choices cpu makes"
            memory["attention_kernel"]["reason"] = reason
    return report


def peak(report: dict[str, Any]) -> int:
    return report["memory"]["peak"]["value"]


def test_an_attention_model_on_meta_analyzed_as_cpu_reports_the_real_cpu_trace():
    torch.manual_seed(0)
    real = crawl_module(SelfAttention(), args=(torch.randn(2, 128, 64),), memory=True)
    model = on_meta(SelfAttention)
    tokens = torch.empty(2, 128, 64, device="meta")
    stand_in = checked(crawl_module(model, args=(tokens,), memory=True, as_device="cpu"))
    meta = crawl_module(model, args=(tokens,), memory=True, meta_kernels="math")
    assert stand_in["memory"]["attention_kernel"]["name"] == real["memory"]["attention_kernel"]["name"] == "flash"
    assert without_stand_ins(stand_in) == real  # every number, every layer's memory, every operator row
    assert meta["memory"]["attention_kernel"]["name"] == "math"
    scores = 2 * 4 * 128 * 128 * 4  # meta's math path materializes them
    assert peak(meta) - peak(stand_in) >= scores


def test_structure_mode_traces_the_same_memory_on_stand_ins():
    """Without the operator recorder the memory trace runs a dispatch mode of its own: below the device queries too."""
    torch.manual_seed(0)
    real = crawl_module(SelfAttention(), args=(torch.randn(2, 128, 64),), memory=True, mode="structure")
    stand_in = crawl_module(on_meta(SelfAttention), args=(torch.empty(2, 128, 64, device="meta"),), memory=True,
                            mode="structure", as_device="cpu")
    assert without_stand_ins(stand_in) == real


def small_bert(meta: bool) -> nn.Module:
    library = import_transformers()
    config = library.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=512, max_position_embeddings=256, attn_implementation="sdpa")
    torch.manual_seed(0)
    return (on_meta(lambda: library.BertModel(config)) if meta else library.BertModel(config)).eval()


def test_a_small_bert_on_meta_analyzed_as_cpu_has_the_peak_and_flops_of_its_real_cpu_trace():
    real = crawl_module(small_bert(meta=False), args=(torch.randint(0, 1000, (2, 256)),), memory=True)
    model = small_bert(meta=True)
    tokens = torch.zeros(2, 256, dtype=torch.long, device="meta")
    stand_in = crawl_module(model, args=(tokens,), memory=True, as_device="cpu")
    meta = crawl_module(model, args=(tokens,), memory=True, meta_kernels="math")
    for name in ("peak", "peak_above_start", "activations"):
        assert stand_in["memory"][name] == real["memory"][name]
    assert stand_in["operator_flops"]["total"] == real["operator_flops"]["total"]
    assert stand_in["operator_flops"]["total"] != meta["operator_flops"]["total"]  # the math path's softmax
    assert (stand_in["memory"]["attention_kernel"]["name"], meta["memory"]["attention_kernel"]["name"]) == (
        "flash", "math")
    assert peak(stand_in) < peak(meta)


def test_a_cnn_on_meta_analyzed_as_cpu_runs_the_cpu_kernels_of_batch_norm_and_max_pooling():
    """On meta a ResNet's evaluation-mode batch norm returns statistics and its max pooling indices that the CPU
    kernels never make; stand-ins on CPU take the CPU's path."""
    models = import_torchvision().models
    torch.manual_seed(0)
    real = crawl_module(models.resnet18().eval(), args=(torch.randn(1, 3, 32, 32),), memory=True)
    model = on_meta(models.resnet18).eval()
    images = torch.empty(1, 3, 32, 32, device="meta")
    stand_in = crawl_module(model, args=(images,), memory=True, as_device="cpu")
    meta = crawl_module(model, args=(images,), memory=True)
    assert without_stand_ins(stand_in) == real
    assert peak(meta) > peak(stand_in)


def test_a_training_step_on_stand_ins_traces_the_real_cpu_step():
    torch.manual_seed(0)
    real = crawl_training_step(SelfAttention(), args=(torch.randn(2, 64, 64),), optimizer="adamw", memory=True)
    model = on_meta(SelfAttention)
    stand_in = checked(crawl_training_step(model, args=(torch.empty(2, 64, 64, device="meta"),), optimizer="adamw",
                                           memory=True, as_device="cpu"))
    assert without_stand_ins(stand_in) == real
    assert stand_in["training"]["memory"]["attention_kernel"]["name"] == "flash"
    assert all(parameter.grad is None for parameter in model.parameters())


def state_of(model: nn.Module) -> list[Any]:
    """Everything the analysis may touch: every parameter and buffer object, gradients, flags and hooks."""
    return [[(name, id(tensor), tensor.device, tensor.requires_grad, tensor.grad) for name, tensor in
             (*model.named_parameters(), *model.named_buffers())],
            [(module.training, dict(module._forward_hooks), dict(module._forward_pre_hooks)) for module in
             model.modules()]]


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_the_model_is_left_exactly_as_found_also_when_its_forward_raises(device):
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).to(device)
    model[1].train()
    model[0].weight.requires_grad_(False)
    before = state_of(model)
    values = [tensor.clone() for tensor in (*model.parameters(), *model.buffers())]
    crawl_module(model, args=(torch.empty(2, 4, device=device),), as_device="cpu", memory=True)
    crawl_training_step(model, args=(torch.empty(2, 4, device=device),), as_device="cpu", optimizer="sgd")
    with pytest.raises(RuntimeError):
        crawl_module(model, args=(torch.empty(2, 5, device=device),), as_device="cpu")
    assert state_of(model) == before
    if device == "cpu":  # no value changed either
        assert all(torch.equal(a, b) for a, b in zip(values, (*model.parameters(), *model.buffers()), strict=True))


def test_tied_weights_stay_tied_and_count_once():
    model = on_meta(lambda: nn.Sequential(nn.Embedding(10, 8), nn.Linear(8, 10, bias=False)))
    model[1].weight = model[0].weight
    report = crawl_module(model, args=(torch.zeros(1, 3, dtype=torch.long, device="meta"),), memory=True,
                          as_device="cpu")
    assert report["memory"]["at_peak"]["parameters"]["value"] == 10 * 8 * 4
    assert model[1].weight is model[0].weight and model[0].weight.device.type == "meta"


def test_stand_ins_dispatch_no_device_query_to_the_recorder():
    """A fake tensor reports its device through dispatch (``prim.device``); the recorder never sees it."""
    model = on_meta(SelfAttention)
    report = crawl_module(model, args=(torch.empty(1, 8, 64, device="meta"),), as_device="cpu")
    operators = [row["operator"] for section in ("by_operator", "uncounted", "ignored")
                 for row in report["operator_flops"][section]]
    assert operators and not [name for name in operators if name.startswith("prim.")]
    assert report["operator_flops"]["total"]["status"] == "complete"
    assert DeviceQueries.supports_higher_order_operators


def test_summary_and_cost_curve_forward_as_device(capsys):
    model = on_meta(SelfAttention)
    report = summary(model, args=(torch.empty(1, 8, 64, device="meta"),), memory=True, as_device="cpu")
    assert report["context"]["stand_ins"] == STAND_INS and report["memory"]["device"] == "cpu"
    curve = cost_curve(model, [8, 16], lambda size: ((torch.empty(1, size, 64, device="meta"),), {}),
                       as_device="cpu")
    real = cost_curve(model, [8, 16], lambda size: ((torch.empty(1, size, 64, device="meta"),), {}),
                      meta_kernels="math")
    assert [point["totals"]["operator_flops"] for point in curve["points"]] != [
        point["totals"]["operator_flops"] for point in real["points"]]  # the math path's softmax on meta


def test_the_report_says_the_analysis_ran_on_stand_ins_and_is_valid():
    report = analyze_call(on_meta(SelfAttention), torch.empty(1, 8, 64, device="meta"), memory=True,
                          as_device=torch.device("cpu"))
    assert report["context"]["stand_ins"] == report["memory"]["stand_ins"] == STAND_INS
    assert report["context"]["devices"] == ["cpu"] and report["inputs"]["args"][0]["device"] == "cpu"
    assert "stand-ins on cpu" in report["memory"]["attention_kernel"]["reason"]
    assert "stand_ins" not in analyze_call(nn.Linear(2, 2), torch.randn(1, 2))["context"]


@pytest.mark.parametrize(("as_device", "expected"), [
    ("meta", ("as_device must name a device whose kernel choices stand-ins keep (cpu, cuda), got 'meta': a model on "
              "meta is analyzed with meta kernels without as_device")),
    ("tpu", "as_device must be None or a device such as 'cpu' or 'cuda:0', got 'tpu'"),
    (3.5, "as_device must be None or a device such as 'cpu' or 'cuda:0', got 3.5"),
    ("xpu", "as_device must name a device whose kernel choices stand-ins keep (cpu, cuda), got 'xpu'"),
])
def test_bad_devices_are_refused_naming_the_argument(as_device, expected):
    with pytest.raises(ValueError) as error:
        crawl_module(nn.Linear(2, 2), (2,), as_device=as_device)
    assert str(error.value) == expected
    with pytest.raises(ValueError, match="^as_device"):
        crawl_training_step(nn.Linear(2, 2), (2,), as_device=as_device)
    with pytest.raises(ValueError, match="^as_device"):
        cost_curve(nn.Linear(2, 2), [1], lambda size: ((torch.randn(1, 2),), {}), as_device=as_device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch has a usable CUDA device")
def test_cuda_stand_ins_are_refused_where_this_torch_has_no_usable_cuda_device():
    with pytest.raises(ValueError, match=r"^as_device='cuda' needs a torch build with a usable CUDA device .* math "
                                         r"attention path"):
        stand_in_device("cuda")


class WithConstant(nn.Module):
    """Holds a tensor that is neither a parameter nor a buffer: it keeps its own device."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.offset = torch.zeros(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + self.offset


def test_a_tensor_outside_the_parameters_buffers_and_call_meets_the_stand_ins_with_a_note():
    model = on_meta(WithConstant)
    with pytest.raises(RuntimeError) as error:
        crawl_module(model, (4,), as_device="cpu")
    assert any(note.startswith("as_device='cpu': a tensor that is neither a parameter, a buffer nor in the call's")
               for note in error.value.__notes__)
    assert model.linear.weight.device.type == "meta"
    assert crawl_module(WithConstant(), (4,), as_device="cpu")["context"]["stand_ins"]["model_devices"] == ["cpu"]


def test_lazy_modules_are_refused_before_anything_runs():
    model = nn.Sequential(nn.LazyLinear(3))
    with pytest.raises(ValueError, match=r"^as_device: the model has uninitialized lazy parameters or buffers "
                                         r"\(0\.weight, 0\.bias\)"):
        crawl_module(model, (4,), as_device="cpu")
    assert isinstance(model[0], nn.LazyLinear)
