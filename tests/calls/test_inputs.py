"""Inputs of one analysis: generated tensors, caller-provided calls, and value-free recursive metadata."""

from __future__ import annotations

import json
from collections import namedtuple

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from torchscan import crawl_module, summary
from torchscan.calls.inputs import generate_inputs, require_available
from torchscan.schema import validate_report
from torchscan.values import describe


def analyze(model, *args, **kwargs):
    report = crawl_module(model, *args, **kwargs)
    validate_report(report)
    json.dumps(report)
    return report


class Capture(nn.Module):
    """Records every call it receives and returns its first argument (or None)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def forward(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return args[0] if args else None


class WithParameter(Capture):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(2, dtype=dtype))


class WithBuffer(Capture):
    def __init__(self, dtype):
        super().__init__()
        self.register_buffer("table", torch.zeros(2, dtype=dtype))


def tensor_meta(shape, dtype="float32", device="cpu", requires_grad=False):
    return {"kind": "tensor", "shape": list(shape), "dtype": dtype, "device": device, "requires_grad": requires_grad}


# -- generated inputs -----------------------------------------------------------------------------------------------

def test_one_shape_gets_a_batch_dimension_of_one():
    model = Capture()
    report = analyze(model, (3, 5))
    ((x,), kwargs), = model.calls
    assert x.shape == (1, 3, 5) and kwargs == {}
    assert report["inputs"] == {"source": "generated", "args": [tensor_meta((1, 3, 5))], "kwargs": []}


def test_a_list_of_shapes_gives_one_positional_tensor_each():
    model = Capture()
    report = analyze(model, [(4,), (6,)])
    (args, _), = model.calls
    assert [tuple(x.shape) for x in args] == [(1, 4), (1, 6)]
    assert report["inputs"]["args"] == [tensor_meta((1, 4)), tensor_meta((1, 6))]


def test_one_dtype_applies_to_every_generated_input():
    model = Capture()
    analyze(model, [(2,), (3,)], torch.float64)
    (args, _), = model.calls
    assert [x.dtype for x in args] == [torch.float64, torch.float64]


def test_an_iterable_supplies_one_dtype_per_shape():
    model = Capture()
    report = analyze(model, [(2,), (3,), (4,)], (dtype for dtype in (torch.int64, torch.bool, torch.float16)))
    (args, _), = model.calls
    assert [x.dtype for x in args] == [torch.int64, torch.bool, torch.float16]
    assert [meta["dtype"] for meta in report["inputs"]["args"]] == ["int64", "bool", "float16"]


@pytest.mark.parametrize("dtypes", [[torch.float32], [torch.float32, torch.int64, torch.bool]])
def test_dtype_count_must_match_the_shapes_exactly(dtypes):
    model = Capture()
    with pytest.raises(ValueError, match="dtype"):
        crawl_module(model, [(2,), (3,)], dtypes)
    assert model.calls == []


def test_device_selects_the_generated_input_device():
    model = Capture()
    report = analyze(model, (2,), device="meta")
    assert model.calls[0][0][0].device.type == "meta"
    assert report["inputs"]["args"] == [tensor_meta((1, 2), device="meta")]
    model = Capture()
    analyze(model, (2,), device=torch.device("cpu"))
    assert model.calls[0][0][0].device.type == "cpu"


def test_dtype_and_device_come_from_the_first_parameter():
    model = WithParameter(torch.float64)
    model.register_buffer("late", torch.zeros(1, dtype=torch.float16))
    analyze(model, (2,))
    assert model.calls[0][0][0].dtype == torch.float64


def test_a_parameter_wins_over_a_buffer_registered_before_it():
    model = Capture()
    model.register_buffer("early", torch.zeros(1, dtype=torch.float16))
    model.weight = nn.Parameter(torch.zeros(1, dtype=torch.float64))
    analyze(model, (2,))
    assert model.calls[0][0][0].dtype == torch.float64


def test_the_first_buffer_is_used_when_there_are_no_parameters():
    model = WithBuffer(torch.float64)
    analyze(model, (2,))
    assert model.calls[0][0][0].dtype == torch.float64


def test_meta_parameters_give_meta_inputs():
    with torch.device("meta"):
        model = WithParameter(torch.bfloat16)
    report = analyze(model, (2,))
    x = model.calls[0][0][0]
    assert x.device.type == "meta" and x.dtype == torch.bfloat16
    assert report["inputs"]["args"] == [tensor_meta((1, 2), dtype="bfloat16", device="meta")]


def test_parameterless_models_default_to_cpu_float32():
    model = Capture()
    report = analyze(model, (2,))
    x = model.calls[0][0][0]
    assert x.device.type == "cpu" and x.dtype == torch.float32
    assert report["totals"]["parameters"] == {"total": 0, "trainable": 0, "frozen": 0, "bytes": 0}


def test_explicit_dtype_overrides_inference():
    model = WithParameter(torch.float64)
    analyze(model, (2,), torch.float16)
    assert model.calls[0][0][0].dtype == torch.float16


def test_generated_integers_are_zero_and_booleans_true():
    model = Capture()
    analyze(model, [(3, 2), (5,), (4,)], [torch.int64, torch.uint8, torch.bool])
    ids, small, mask = model.calls[0][0]
    assert ids.dtype == torch.int64 and ids.eq(0).all()
    assert small.dtype == torch.uint8 and small.eq(0).all()
    assert mask.dtype == torch.bool and mask.all() and mask.shape == (1, 4)


class OperatorLog(TorchDispatchMode):
    """Every operator dispatched while active, with the dtypes of the tensors it returned."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        outputs = out if isinstance(out, (tuple, list)) else (out,)
        self.seen.append((str(func), [o.dtype for o in outputs if isinstance(o, torch.Tensor)]))
        return out


def test_integer_and_boolean_inputs_use_no_random_floating_temporary():
    with OperatorLog() as log:
        generated = generate_inputs([(8,), (8,)], [torch.int32, torch.bool], torch.device("cpu"))
    assert [x.dtype for x in generated] == [torch.int32, torch.bool]
    assert log.seen, "generation was not observed"
    for name, dtypes in log.seen:
        assert not any(word in name for word in ("rand", "uniform", "normal", "bernoulli")), name
        assert not any(dtype.is_floating_point for dtype in dtypes), (name, dtypes)


def test_generated_inputs_do_not_advance_the_global_random_generator():
    model = Capture()
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    analyze(model, [(3, 8, 8), (5,), (2,)], [torch.float32, torch.float16, torch.int64])
    assert torch.equal(torch.get_rng_state(), before)
    x = model.calls[0][0][0]
    assert x.dtype == torch.float32 and x.shape == (1, 3, 8, 8)


# -- caller-provided calls ----------------------------------------------------------------------------------------------

def test_args_and_kwargs_are_forwarded_as_the_same_objects():
    model = WithParameter(torch.float32)
    input_ids = torch.tensor([[1, 2, 0, 0]])
    attention_mask = input_ids.ne(0)
    grad = torch.ones(3, dtype=torch.float16, requires_grad=True)  # not batched, not float32, needs grad
    report = analyze(model, args=(input_ids, grad), kwargs={"attention_mask": attention_mask, "return_dict": True,
                                                            "cache": None})
    (args, kwargs), = model.calls
    assert args[0] is input_ids and args[1] is grad
    assert kwargs["attention_mask"] is attention_mask
    assert kwargs["return_dict"] is True and kwargs["cache"] is None
    assert report["inputs"] == {
        "source": "provided",
        "args": [tensor_meta((1, 4), dtype="int64"), tensor_meta((3,), dtype="float16", requires_grad=True)],
        "kwargs": [{"key": "attention_mask", "value": tensor_meta((1, 4), dtype="bool")},
                   {"key": "return_dict", "value": {"kind": "scalar", "type": "bool"}},
                   {"key": "cache", "value": {"kind": "none"}}],
    }


def test_a_kwargs_only_call_is_valid():
    class KeywordOnly(nn.Module):
        def forward(self, *, signal):
            return signal * 2

    signal = torch.ones(2, 3)
    report = analyze(KeywordOnly(), kwargs={"signal": signal})
    assert report["inputs"]["args"] == []
    assert report["inputs"]["kwargs"] == [{"key": "signal", "value": tensor_meta((2, 3))}]
    assert report["layers"][0]["output"] == tensor_meta((2, 3))


def test_an_empty_call_is_valid():
    class Constant(nn.Module):
        def forward(self):
            return torch.zeros(2)

    report = analyze(Constant(), args=())
    assert report["inputs"] == {"source": "provided", "args": [], "kwargs": []}


@pytest.mark.parametrize("options", [
    {"input_shape": (3,), "args": (torch.ones(3),)},
    {"input_shape": (3,), "kwargs": {"x": torch.ones(3)}},
])
def test_input_shape_and_a_complete_call_are_mutually_exclusive(options):
    model = Capture()
    with pytest.raises(ValueError, match="mutually exclusive"):
        crawl_module(model, **options)
    assert model.calls == []


@pytest.mark.parametrize("options", [
    {"dtype": torch.float64, "args": (torch.ones(3),)},
    {"device": "cpu", "kwargs": {"x": torch.ones(3)}},
])
def test_dtype_and_device_only_configure_generated_inputs(options):
    model = Capture()
    with pytest.raises(ValueError, match="dtype and device"):
        crawl_module(model, **options)
    assert model.calls == []


# -- bad input ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("input_shape, error", [
    ("3, 224", TypeError),
    (3.5, TypeError),
    ((3, "4"), TypeError),
    ((3, True), TypeError),
    ((3, 2.0), TypeError),
    ([(3,), "x"], TypeError),
    ([(3,), [2, None]], TypeError),
    ((3, -1), ValueError),
])
def test_bad_input_shapes_are_refused_before_the_model_runs(input_shape, error):
    model = Capture()
    with pytest.raises(error, match="input_shape"):
        crawl_module(model, input_shape)
    assert model.calls == []


def test_an_empty_list_of_shapes_is_refused():
    model = Capture()
    with pytest.raises(ValueError, match="input_shape is an empty list: pass at least one shape"):
        crawl_module(model, [])
    assert model.calls == []


def test_the_empty_tuple_is_the_shape_of_a_per_sample_scalar():
    model = Capture()
    report = analyze(model, ())
    assert [args[0].shape for args, _ in model.calls] == [torch.Size([1])]
    assert report["inputs"]["args"] == [tensor_meta((1,))]
    assert analyze(Capture(), [()])["inputs"] == report["inputs"]


def test_missing_inputs_are_refused():
    with pytest.raises(TypeError, match="input_shape"):
        crawl_module(Capture())


@pytest.mark.parametrize("dtype", ["float32", 32, [torch.float32, "int64"], float])
def test_bad_dtypes_are_refused_before_the_model_runs(dtype):
    model = Capture()
    with pytest.raises(TypeError, match="dtype"):
        crawl_module(model, [(2,), (2,)], dtype)
    assert model.calls == []


@pytest.mark.parametrize("device", ["gpu-ish", "cuda:x", 3.5])
def test_bad_devices_are_refused_before_the_model_runs(device):
    model = Capture()
    with pytest.raises(ValueError, match="device"):
        crawl_module(model, (2,), device=device)
    assert model.calls == []


def unavailable_devices() -> list[str]:
    """Devices this torch build or machine does not have: CUDA when it is absent, else an index past the last GPU."""
    cuda = ["cuda", "cuda:0"] if not torch.cuda.is_available() else [f"cuda:{torch.cuda.device_count()}"]
    return [*cuda, *(["mps"] if not torch.mps.is_available() else [])]


@pytest.mark.parametrize("device", unavailable_devices())
@pytest.mark.parametrize("entry", ["crawl_module", "summary"])
def test_a_device_this_machine_lacks_is_refused_by_name(device, entry):
    model = Capture()
    call = {"crawl_module": crawl_module, "summary": summary}[entry]
    with pytest.raises(ValueError, match=rf"device='{device}' is not available: this (torch|machine)"):
        call(model, (2,), device=device)
    with pytest.raises(ValueError, match="device="):
        call(model, (2,), device=torch.device(device))
    assert model.calls == []


def test_require_available_names_the_argument_it_checks():
    require_available(torch.device("cpu"), argument="target")
    require_available(torch.device("meta"), argument="target")
    with pytest.raises(ValueError, match="^target="):
        require_available(torch.device(unavailable_devices()[0]), argument="target")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_an_available_cuda_device_generates_inputs_there():
    report = analyze(Capture(), (2,), device="cuda")
    assert report["inputs"]["args"][0]["device"] == "cuda"


@pytest.mark.parametrize("args", [torch.ones(3), "abc", {"x": 1}])
def test_args_must_be_a_tuple(args):
    model = Capture()
    with pytest.raises(TypeError, match="args"):
        crawl_module(model, args=args)
    assert model.calls == []


@pytest.mark.parametrize("kwargs", [[("x", torch.ones(3))], torch.ones(3), {1: torch.ones(3)}])
def test_kwargs_must_be_a_mapping_of_names(kwargs):
    model = Capture()
    with pytest.raises(TypeError, match="kwargs"):
        crawl_module(model, kwargs=kwargs)
    assert model.calls == []


# -- recursive metadata -------------------------------------------------------------------------------------------------

Pair = namedtuple("Pair", ["left", "right"])


class Opaque:
    """An object whose repr would leak a value."""

    def __repr__(self):
        return "Opaque(SECRET-REPR-4711)"


class Echo(nn.Module):
    """Returns a nested structure built from its inputs."""

    def forward(self, x, nested, *, options):
        return {"features": (x, [x.sum(), None]), "pair": Pair(x, 3), "label": options["label"]}


SECRET = "TOP-SECRET-value-0x51"
PATH = "/home/someone/private/weights.pt"


def test_input_and_output_metadata_keep_structure_without_values():
    x = torch.full((2, 3), 1234.5678)
    nested = (Pair(x, [7, 2.5]), {"mask": x.gt(0), PATH: x, "note": SECRET}, Opaque(), 987654321)
    report = analyze(Echo(), args=(x, nested), kwargs={"options": {"label": SECRET, "count": 424242}})
    x_meta = tensor_meta((2, 3))
    assert report["inputs"]["args"] == [x_meta, {"kind": "tuple", "items": [
        {"kind": "namedtuple", "type": "Pair", "items": [
            {"key": "left", "value": x_meta},
            {"key": "right", "value": {"kind": "list", "items": [{"kind": "scalar", "type": "int"},
                                                                  {"kind": "scalar", "type": "float"}]}}]},
        {"kind": "mapping", "items": [
            {"key": "mask", "value": tensor_meta((2, 3), dtype="bool")},
            {"key": None, "value": x_meta},
            {"key": "note", "value": {"kind": "scalar", "type": "str"}}]},
        {"kind": "object", "type": "Opaque"},
        {"kind": "scalar", "type": "int"}]}]
    assert report["inputs"]["kwargs"] == [{"key": "options", "value": {"kind": "mapping", "items": [
        {"key": "label", "value": {"kind": "scalar", "type": "str"}},
        {"key": "count", "value": {"kind": "scalar", "type": "int"}}]}}]
    assert report["layers"][0]["output"] == {"kind": "mapping", "items": [
        {"key": "features", "value": {"kind": "tuple", "items": [
            x_meta, {"kind": "list", "items": [tensor_meta(()), {"kind": "none"}]}]}},
        {"key": "pair", "value": {"kind": "namedtuple", "type": "Pair", "items": [
            {"key": "left", "value": x_meta}, {"key": "right", "value": {"kind": "scalar", "type": "int"}}]}},
        {"key": "label", "value": {"kind": "scalar", "type": "str"}}]}
    text = json.dumps(report)
    for leaked in (SECRET, PATH, "private", "1234.5", "987654321", "424242", "SECRET-REPR", "0x"):
        assert leaked not in text, leaked


def test_non_identifier_keyword_names_are_withheld():
    class AnyKeywords(nn.Module):
        def forward(self, **kwargs):
            return torch.zeros(1)

    report = analyze(AnyKeywords(), kwargs={PATH: torch.ones(1), "ok": torch.ones(1)})
    assert [item["key"] for item in report["inputs"]["kwargs"]] == [None, "ok"]
    assert PATH not in json.dumps(report)


def test_tensor_metadata_records_gradient_requirement_and_device():
    tensor = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    assert describe(tensor) == tensor_meta((4,), dtype="float64", requires_grad=True)
    assert describe(torch.empty(2, 0, device="meta")) == tensor_meta((2, 0), device="meta")
    assert describe(nn.Parameter(torch.zeros(1)))["kind"] == "tensor"
