"""Module estimates memoized per distinct call: the key tells apart every call a formula could price differently,
identical calls share one evaluation, and every record still gets its own results and diagnostics."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchscan_testing import analyze_call

from torchscan import ModuleCall, ModuleHandler
from torchscan.builtin_handlers import DEFAULT_HANDLERS, builtin_for
from torchscan.estimate_memo import EstimateMemo, module_configuration
from torchscan.estimation import CallEstimate
from torchscan.results import Incomplete, complete
from torchscan.values import Unkeyable

NEEDED = frozenset({"macs"})
#: One memo for the tests of the key, as one analysis has; it reads a module's configuration by the module's id,
#: so the modules it saw are kept alive (a new module could otherwise reuse an id).
MEMO = EstimateMemo()
SEEN: list[nn.Module] = []


def memo_key(memo: EstimateMemo, handler, needed, module, args, kwargs, output):
    """The whole key of one call (structure, configuration number), or None when it cannot be memoized: two calls
    share an estimate exactly when their keys are equal."""
    structure = memo.structure(handler, needed, module, args, kwargs, output)
    number = None if structure is None else memo.configuration(module)
    return None if number is None else (structure, number)


def call_key(handler, needed, module, args, kwargs, output):
    SEEN.append(module)
    return memo_key(MEMO, handler, needed, module, args, kwargs, output)


def key(module: nn.Module, *args, output=None, **kwargs):
    output = module(*args, **kwargs) if output is None else output
    return call_key(builtin_for(nn.Linear), NEEDED, module, args, kwargs, output)


def conv(**options) -> nn.Conv2d:
    torch.manual_seed(0)
    return nn.Conv2d(4, 4, 3, **options).eval()


X = torch.ones(1, 4, 8, 8)


# -- the key ------------------------------------------------------------------------------------------------------


def test_identical_calls_of_equally_configured_modules_share_a_key():
    assert key(conv(), X) == key(conv(), torch.zeros(1, 4, 8, 8))  # values never matter, only structure
    # nor the device: formulas read shapes, and count alike on meta
    assert key(conv(), X) == key(conv(), X.to("meta"), output=torch.empty(1, 4, 6, 6, device="meta"))


@pytest.mark.parametrize("other", [
    lambda: key(conv(stride=2), X),                              # a module attribute (stride)
    lambda: key(conv(groups=2), X),                              # groups
    lambda: key(conv(bias=False), X),                            # a parameter that is absent
    lambda: key(conv().train(), X),                              # the training flag
    lambda: key(conv(), torch.ones(1, 4, 9, 8)),                 # an input shape
    lambda: key(conv().double(), X.double()),                    # dtypes
])
def test_calls_a_formula_could_price_differently_never_share_a_key(other):
    assert key(conv(), X) != other()


def test_scalar_arguments_are_part_of_the_key_with_their_type():
    attention = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q = torch.ones(1, 3, 8)
    mask = nn.Transformer.generate_square_subsequent_mask(3)
    causal = key(attention, q, q, q, attn_mask=mask, is_causal=True, need_weights=False)
    plain = key(attention, q, q, q, attn_mask=mask, is_causal=False, need_weights=False)
    assert causal != plain
    output = torch.ones(2)
    assert call_key(None, NEEDED, nn.Identity(), (1,), {}, output) != call_key(None, NEEDED, nn.Identity(), (1.0,), {},
                                                                               output)
    assert call_key(None, NEEDED, nn.Identity(), (1,), {}, output) != call_key(None, NEEDED, nn.Identity(), (True,),
                                                                               {}, output)


def test_a_view_of_the_input_and_a_copy_have_different_keys():
    x = torch.ones(2, 3, 4)
    flatten = nn.Flatten()
    assert key(flatten, x, output=x.view(2, 12)) != key(flatten, x, output=x.reshape(2, 12).clone())
    relu = nn.ReLU(inplace=True)  # the input itself, a view of a view, and a copy
    view = x[1:]
    same, nested_view, copy = (key(relu, view, output=output) for output in (view, view.view(1, 3, 4), view.clone()))
    assert same == nested_view != copy
    nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    assert key(relu, nested, output=nested) is None  # no single shape: never memoized


def test_needed_fields_and_the_handler_are_part_of_the_key():
    layer, x = nn.Linear(3, 3), torch.ones(2, 3)
    output = layer(x)
    base = call_key(builtin_for(nn.Linear), NEEDED, layer, (x,), {}, output)
    assert base != call_key(builtin_for(nn.Linear), frozenset({"dmas"}), layer, (x,), {}, output)
    assert base != call_key(builtin_for(nn.ReLU), NEEDED, layer, (x,), {}, output)


def test_a_call_holding_an_object_the_key_cannot_describe_is_not_memoized():
    layer = nn.Linear(3, 3)
    layer.note = object()
    assert call_key(builtin_for(nn.Linear), NEEDED, layer, (torch.ones(3),), {}, torch.ones(3)) is None
    assert call_key(builtin_for(nn.Linear), NEEDED, nn.Linear(3, 3), (object(),), {}, torch.ones(3)) is None
    assert module_configuration(nn.ReLU())[0] is nn.ReLU


def test_a_lazy_module_is_read_again_once_it_materializes():
    memo, layer = EstimateMemo(), nn.LazyLinear(3)
    assert memo_key(memo, None, NEEDED, layer, (torch.ones(2),), {}, torch.ones(3)) is None  # sizes unknown yet
    layer(torch.ones(2))  # becomes a Linear(2, 3)
    materialized = memo_key(memo, None, NEEDED, layer, (torch.ones(2),), {}, torch.ones(3))
    assert materialized is not None
    assert materialized == memo_key(memo, None, NEEDED, nn.Linear(2, 3), (torch.ones(2),), {}, torch.ones(3))


# -- memoized analyses --------------------------------------------------------------------------------------------


class Stage(nn.Module):
    """The same leaf type called on two shapes, twice each."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Tripled() for _ in range(4))

    def forward(self, x):
        small, large = x[:, :2], x
        return [block(small if index % 2 else large) for index, block in enumerate(self.blocks)]


class Tripled(nn.Module):
    def forward(self, x):
        return x * 3


def count_calls(calls: list, memoize: bool) -> ModuleHandler:
    def estimate(call: ModuleCall):
        calls.append(call)
        elements = call.output.numel()
        return {"module_flops": elements, "macs": Incomplete(0, f"{elements} elements"), "dmas": 2 * elements,
                "receptive_field": 1, "effective_stride": 1, "effective_padding": 0}

    return ModuleHandler(estimate, method="formula:tripled", memoize=memoize)


def test_a_memoizing_builtin_runs_once_per_distinct_call_and_every_record_gets_its_own_metrics(monkeypatch):
    results = {}
    for memoize in (False, True):
        calls: list = []
        monkeypatch.setitem(DEFAULT_HANDLERS, Tripled, count_calls(calls, memoize))
        results[memoize] = analyze_call(Stage(), torch.ones(1, 6))
        assert len(calls) == (2 if memoize else 4)
    plain, memoized = results[False], results[True]
    assert memoized == plain  # the same report, diagnostics addressed to each call included
    blocks = [layer for layer in memoized["layers"] if layer["path"].startswith("blocks.")]
    assert [layer["metrics"]["module_flops"]["value"] for layer in blocks] == [6, 2, 6, 2]
    findings = [(item["path"], item["message"].rsplit(": ", 1)[1]) for item in memoized["diagnostics"]]
    assert findings == [("blocks.0", "6 elements"), ("blocks.1", "2 elements"), ("blocks.2", "6 elements"),
                        ("blocks.3", "2 elements")]
    replayed, computed = blocks[2]["metrics"], blocks[0]["metrics"]
    assert replayed == computed and replayed["module_flops"] is not computed["module_flops"]  # results of its own
    del computed["macs"]
    computed["module_flops"]["value"] = -1
    assert "macs" in replayed and replayed["module_flops"]["value"] == 6


def test_a_caller_registration_turns_the_memo_off_for_its_type(monkeypatch):
    """The caller's handler may read anything: its fallback built-in runs for every call, as the caller's does."""
    builtin_calls: list = []
    monkeypatch.setitem(DEFAULT_HANDLERS, Tripled, count_calls(builtin_calls, memoize=True))
    caller_calls: list = []

    def macs_only(call: ModuleCall) -> dict:
        caller_calls.append(call)
        return {"macs": 0}

    report = analyze_call(Stage(), torch.ones(1, 6), custom_modules={Tripled: ModuleHandler(macs_only)})
    assert len(caller_calls) == 4 and len(builtin_calls) == 4
    blocks = [layer for layer in report["layers"] if layer["path"].startswith("blocks.")]
    assert [layer["metrics"]["module_flops"]["value"] for layer in blocks] == [6, 2, 6, 2]
    assert {layer["metrics"]["macs"]["status"] for layer in blocks} == {"complete"}


def test_built_in_formulas_of_repeated_layers_give_the_numbers_of_fresh_evaluations(monkeypatch):
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, stride=stride, groups=groups),
                                          nn.BatchNorm2d(4), nn.ReLU())
                            for stride, groups in ((1, 1), (1, 1), (2, 1), (1, 2), (1, 1)))).eval()
    memoized = analyze_call(model, X)
    for kind in (nn.Conv2d, nn.BatchNorm2d, nn.ReLU):
        handler = DEFAULT_HANDLERS[kind]
        monkeypatch.setitem(DEFAULT_HANDLERS, kind, ModuleHandler(handler.callback, method=handler.method))
    assert analyze_call(model, X) == memoized
    macs = [layer["metrics"]["macs"]["value"] for layer in memoized["layers"] if layer["type"].endswith("Conv2d")]
    assert macs == [9216, 9216, 2304, 1152, 2304]  # per output element: C_in / groups * 3 * 3 MACs


class Scaled(nn.Module):
    """Multiplies by a factor that only its configuration shows (the call structure of every instance is alike)."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


def by_factor(calls: list) -> ModuleHandler:
    def estimate(call: ModuleCall):
        calls.append(call.module.factor)
        return {"module_flops": call.module.factor * call.output.numel()}

    return ModuleHandler(estimate, method="formula:scaled", memoize=True)


def test_calls_alike_in_structure_but_not_in_configuration_never_share_an_estimate(monkeypatch):
    calls: list = []
    monkeypatch.setitem(DEFAULT_HANDLERS, Scaled, by_factor(calls))
    model = nn.Sequential(Scaled(2), Scaled(3), Scaled(2), Scaled(3))
    report = analyze_call(model, torch.ones(1, 4))
    assert [layer["metrics"]["module_flops"]["value"] for layer in report["layers"][1:]] == [8, 12, 8, 12]
    assert calls == [2, 3]  # the third and fourth calls share the first and second calls' estimates


def test_a_configuration_is_read_only_once_a_call_structure_is_shared(monkeypatch):
    from torchscan import estimate_memo

    read: list[type] = []
    original = estimate_memo.module_configuration
    monkeypatch.setattr(estimate_memo, "module_configuration", lambda module: read.append(type(module)) or
                        original(module))
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU())
    analyze_call(model, torch.ones(1, 4))
    # every Linear call has a structure of its own; only the second and third ReLU share one, (1, 8) in and out
    assert read == [nn.ReLU, nn.ReLU]


# -- the configuration and the stored estimates -----------------------------------------------------------------


class Configured(nn.Module):
    """Takes any attributes: the configurations of two instances differ exactly where their attributes do."""

    def __init__(self, **attributes) -> None:
        super().__init__()
        self.__dict__.update(attributes)


def test_configurations_tell_apart_the_item_types_and_the_grouping_of_tuple_attributes():
    def configuration(**attributes):
        return module_configuration(Configured(**attributes))

    assert configuration(kernel=(1, 1), scale=2) == configuration(kernel=(1, 1), scale=2)
    assert configuration(kernel=(1, 1)) != configuration(kernel=(1.0, 1.0))  # equal as Python values
    assert configuration(kernel=(1, 1)) != configuration(kernel=(True, True))
    assert configuration(a=(1, 2), b=(3,)) != configuration(a=(1,), b=(2, 3))
    assert configuration(scale=1) != configuration(scale=1.0)
    # values that are neither scalars nor tuples of them are described one by one, lists and nested tuples included
    assert configuration(sizes=[1, 2], nested=((1, 2), 3)) == configuration(sizes=[1, 2], nested=((1, 2), 3))
    assert configuration(sizes=[1, 2]) != configuration(sizes=(1, 2))
    assert configuration(nested=((1, 2), 3)) != configuration(nested=((1.0, 2), 3))


def test_configurations_of_equal_attributes_are_equal_whether_or_not_values_are_one_object():
    def configuration(**attributes):
        return module_configuration(Configured(**attributes))

    pair = (1, 1)
    assert configuration(stride=pair, dilation=pair) == configuration(stride=(1, 1), dilation=(1, 1))
    assert configuration(mode="nearest_".removesuffix("_"))  # not interned == configuration(mode="nearest")


def test_attributes_marshal_cannot_write_are_keyed_value_by_value():
    def configuration(**attributes):
        return module_configuration(Configured(**attributes))

    assert configuration(dtype=torch.float16, scale=2) == configuration(dtype=torch.float16, scale=2)
    assert configuration(dtype=torch.float16, scale=2) != configuration(dtype=torch.float32, scale=2)
    assert configuration(dtype=torch.float16, scale=2) != configuration(dtype=torch.float16, scale=2.0)
    with pytest.raises(Unkeyable):
        configuration(callback=print)
    with pytest.raises(Unkeyable):
        configuration(table=torch.ones(2))  # a tensor attribute may be read for its values


def test_absent_and_present_parameters_and_buffers_are_part_of_the_configuration():
    with_bias, without = module_configuration(nn.Linear(3, 2)), module_configuration(nn.Linear(3, 2, bias=False))
    assert with_bias != without
    assert module_configuration(nn.BatchNorm1d(3)) != module_configuration(nn.BatchNorm1d(3, affine=False))
    norm = nn.BatchNorm1d(3)
    norm.running_var = None  # a buffer registered as None
    assert module_configuration(norm) != module_configuration(nn.BatchNorm1d(3))


def test_a_replay_is_the_stored_estimate_and_its_copies_have_their_own_containers_and_diagnostics():
    """The memo hands the tracer its own object (shared while nothing edits it); an enclosing owner's formula may
    still drop fields from a replay, and users edit reports: every mapping, list and result of a copy is its own."""
    memo, layer = EstimateMemo(), nn.Linear(3, 3)
    x = torch.ones(3)
    structure = memo.structure(None, NEEDED, layer, (x,), {}, x)
    stored = CallEstimate({"macs": complete(9, "MACs", "module_call", "formula:linear")},
                          diagnostics=[{"code": "x", "path": "layer", "call_index": 0}])
    memo.store(structure, layer, stored)
    assert memo.replay(structure, layer) is memo.replay(structure, layer)
    first, second = (memo.replay(structure, layer).copy({"path": "layer", "call_index": index}) for index in (1, 2))
    assert first.metrics is not second.metrics and first.metrics["macs"] is not second.metrics["macs"]
    assert first.metrics == second.metrics == stored.metrics
    assert first.ownership is not second.ownership and first.delegated is not second.delegated
    assert [item["call_index"] for item in (*first.diagnostics, *second.diagnostics)] == [1, 2]


def test_records_of_a_shared_replay_own_their_objects():
    """A replay without diagnostics stays the memo's object until the records are assembled: each record then gets
    its own metrics, results, lists and ownership, so editing one record leaves the others as they were."""
    model = nn.Sequential(nn.Conv2d(2, 2, 3, padding=1), nn.Conv2d(2, 2, 3, padding=1))  # one structure, one configuration
    report = analyze_call(model, torch.ones(1, 2, 6, 6))
    first, second = (layer for layer in report["layers"] if layer["path"] in ("0", "1"))
    assert first["metrics"] == second["metrics"] and not report["diagnostics"]
    assert first["metrics"] is not second["metrics"]
    assert first["metric_ownership"] is not second["metric_ownership"]
    for name, result in first["metrics"].items():
        assert result is not second["metrics"][name]
        assert result["value"] is not second["metrics"][name]["value"] or type(result["value"]) is int
    first["metrics"]["receptive_field"]["value"].append(0)
    first["metric_ownership"].clear()
    assert second["metrics"]["receptive_field"]["value"] == [3, 3] and second["metric_ownership"]
