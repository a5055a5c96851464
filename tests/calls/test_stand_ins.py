"""``as_device``: an analysis on fake-tensor stand-ins of a device keeps that device's kernel choices without
allocating, so a model on ``meta`` analyzed ``as_device="cpu"`` reports what the same model's real CPU trace reports
(where meta's own kernels differ: fused attention, batch normalization and max pooling in evaluation mode), and the
model is left exactly as it was."""

from __future__ import annotations

import copy
import resource
import traceback
from typing import Any

import pytest
import torch
from integrations.third_party_models import import_torchvision, import_transformers
from torch import nn
from torch.nn import functional
from torchscan_testing import analyze_call, checked

from torchscan import cost_curve, crawl_module, crawl_training_step, decode_step_inputs, summary
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
    note = error.value.__notes__[-1]
    assert note.startswith("as_device='cpu': a tensor that stand-ins do not replace kept its own device and met the "
                           "cpu stand-ins.")
    assert "This model holds tensors in plain module attributes: offset (WithConstant). Register such a tensor as a " \
           "buffer, pass it as a tensor of the call, or analyze without as_device." in note
    assert "\n" not in note
    assert model.linear.weight.device.type == "meta"
    assert crawl_module(WithConstant(), (4,), as_device="cpu")["context"]["stand_ins"]["model_devices"] == ["cpu"]


def test_lazy_modules_are_refused_before_anything_runs():
    model = nn.Sequential(nn.LazyLinear(3))
    with pytest.raises(ValueError, match=r"^as_device: the model has uninitialized lazy parameters or buffers "
                                         r"\(0\.weight, 0\.bias\)"):
        crawl_module(model, (4,), as_device="cpu")
    assert isinstance(model[0], nn.LazyLinear)


# -- decode steps: the tensors inside a KV cache object --------------------------------------------------------------


def tiny_llama(meta: bool) -> nn.Module:
    """A Llama with grouped-query attention (4 query heads share 2 key/value heads), random weights."""
    library = import_transformers()
    config = library.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=128)
    torch.manual_seed(0)
    return on_meta(lambda: library.LlamaForCausalLM(config)) if meta else library.LlamaForCausalLM(config)


def cache_state(cache: Any) -> list[Any]:
    """Every object the analysis may touch in a ``DynamicCache``: its layer list, each layer and each attribute."""
    return [id(cache.layers), cache.get_seq_length(),
            *[(id(layer), dict(vars(layer)), *[(tensor.device, tuple(tensor.shape)) for tensor in
                                                (layer.keys, layer.values) if tensor is not None])
              for layer in cache.layers]]


def test_a_decode_step_on_stand_ins_runs_cpu_flash_attention_and_leaves_the_cache_as_it_was():
    """The cache's tensors get stand-ins inside a copy of the cache, so attention runs CPU's fused kernel, the
    report is the real CPU decode step's number for number, and the caller's cache never sees the new position."""
    on_cpu = tiny_llama(meta=False)
    real = crawl_module(on_cpu, kwargs=decode_step_inputs(on_cpu, 16)[1], memory=True)
    model = tiny_llama(meta=True)
    _, kwargs = decode_step_inputs(model, 16, device="meta")
    before = cache_state(kwargs["cache"])
    stand_in = checked(crawl_module(model, kwargs=kwargs, memory=True, as_device="cpu"))
    assert cache_state(kwargs["cache"]) == before and kwargs["cache"].get_seq_length() == 16
    assert stand_in["memory"]["attention_kernel"]["name"] == "flash"
    assert "aten._scaled_dot_product_flash_attention_for_cpu" in [
        row["operator"] for row in stand_in["operator_flops"]["by_operator"]]
    assert without_stand_ins(stand_in) == real
    _, kwargs = decode_step_inputs(model, 16, device="meta")
    meta = crawl_module(model, kwargs=kwargs, memory=True)
    assert meta["memory"]["attention_kernel"]["name"] == "efficient"  # CUDA's pick for float32, assumed on meta
    assert stand_in["inputs"]["kv_cache"] == meta["inputs"]["kv_cache"]
    assert stand_in["inputs"]["kv_cache"]["bytes"]["value"] == 2 * 2 * 2 * 16 * 16 * 4  # layers, k/v, heads, ...


def test_a_prefill_into_an_empty_cache_on_stand_ins_leaves_the_cache_empty():
    """An empty cache holds no tensor, so nothing copies it: the forward fills the caller's layers, and the
    analysis puts their attributes back afterwards."""
    library = import_transformers()
    model = tiny_llama(meta=True)
    cache = library.DynamicCache(config=model.config)
    before = [dict(vars(layer)) for layer in cache.layers]
    report = crawl_module(model, kwargs={"input_ids": torch.zeros(1, 8, dtype=torch.long, device="meta"),
                                         "cache": cache}, memory=True, as_device="cpu")
    assert report["memory"]["attention_kernel"]["name"] == "flash"
    assert [dict(vars(layer)) for layer in cache.layers] == before and cache.get_seq_length() == 0


def test_a_static_cache_on_stand_ins_follows_its_tensors_to_the_stand_in_device():
    """A ``StaticCache`` layer writes in place and makes its positions on its own ``device`` attribute: the
    copy's attribute names the stand-ins' device, and the caller's tensors are never written."""
    library = import_transformers()
    model = tiny_llama(meta=True)
    cache = library.StaticCache(config=model.config, max_cache_len=32)
    for index in range(2):
        states = torch.zeros(1, 2, 10, 16, device="meta")
        cache.update(states, states.clone(), index)
    before = [dict(vars(layer)) for layer in cache.layers]
    report = crawl_module(model, kwargs={"input_ids": torch.zeros(1, 1, dtype=torch.long, device="meta"),
                                         "cache": cache, "position_ids": torch.full((1, 1), 10, device="meta")},
                          memory=True, as_device="cpu")
    assert report["memory"]["attention_kernel"]["name"] == "flash"
    assert [dict(vars(layer)) for layer in cache.layers] == before
    assert cache.layers[0].device == torch.device("meta")
    field = report["inputs"]["kv_cache"]  # attention reads every preallocated position, written or not
    assert field["bytes"]["value"] == 2 * 2 * 2 * 32 * 16 * 4 and field["positions"] == 32


class Marked(torch.Tensor):
    """A tensor subclass: a plain fake tensor would drop whatever it does."""


def test_a_cache_tensor_without_a_stand_in_is_refused_before_the_forward_naming_where_it_sits():
    model = tiny_llama(meta=True)
    _, kwargs = decode_step_inputs(model, 4, device="meta")
    layer = kwargs["cache"].layers[1]
    layer.keys = layer.keys.as_subclass(Marked)
    before, state = cache_state(kwargs["cache"]), state_of(model)
    with pytest.raises(TypeError) as error:
        crawl_module(model, kwargs=kwargs, as_device="cpu")
    assert str(error.value) == (
        "as_device='cpu': kwargs['cache'].layers[1].keys (Marked) cannot get fake-tensor stand-ins: a tensor "
        "subclass, whose own behaviour a plain fake tensor would drop. Left as it is, it would keep its own device and "
        "meet the stand-ins in the forward. Pass its tensors as tensors of the call (in tuples, lists, dicts, "
        "dataclasses or objects that can be copied), register them as buffers of the model, or analyze without "
        "as_device.")
    assert len(traceback.extract_tb(error.value.__traceback__)) < 10  # raised by the check, not inside the forward
    assert error.value.__cause__ is None and not getattr(error.value, "__notes__", None)
    assert cache_state(kwargs["cache"]) == before and state_of(model) == state


class Sealed:
    """An object whose attributes cannot be set, so that ``copy.copy`` (which sets slots) fails."""

    __slots__ = ("state",)

    def __init__(self, state: torch.Tensor) -> None:
        object.__setattr__(self, "state", state)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is sealed")


class AddsState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, extra: Any) -> torch.Tensor:
        return self.linear(x) + extra[0].state


def test_an_object_that_cannot_be_copied_is_refused_naming_it():
    model = on_meta(AddsState)
    sealed = Sealed(torch.zeros(4, device="meta"))
    with pytest.raises(TypeError, match=(
            r"^as_device='cpu': args\[1\]\[0\] \(Sealed\) cannot get fake-tensor stand-ins: copying it failed "
            r"\(AttributeError: Sealed is sealed\)\. Left as it is, it would keep its own device")):
        crawl_module(model, args=(torch.zeros(2, 4, device="meta"), [sealed]), as_device="cpu")
    assert sealed.state.device.type == "meta" and model.linear.weight.device.type == "meta"


def test_a_llama2_7b_decode_step_at_32k_context_on_stand_ins_allocates_nothing():
    """The issue's target: Llama-2-7B in bfloat16 on meta, one token after 32,768 positions, on CPU stand-ins
    (about a second here). The cache's 16 GiB and the parameters' 12.55 GiB stay fake or meta."""
    from zoo.hf_llama import llama2_7b

    with torch.device("meta"):
        model = llama2_7b(max_position_embeddings=65536).to(torch.bfloat16)
    _, kwargs = decode_step_inputs(model, 32768, device="meta")
    resident = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = crawl_module(model, kwargs=kwargs, memory=True, as_device="cpu")
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - resident) * 1024 < 2**30  # Linux: kilobytes
    assert report["memory"]["attention_kernel"]["name"] == "flash"
    assert report["inputs"]["kv_cache"]["bytes"]["value"] == 2 * 32 * 32768 * 4096 * 2  # 16 GiB
    assert report["totals"]["parameters"]["total"] == 6_738_415_616
    assert kwargs["cache"].get_seq_length() == 32768 and kwargs["cache"].layers[0].keys.device.type == "meta"
