"""The per-analysis memo of operator formulas: one evaluation per call signature, and never a shared result for
calls that differ in anything a formula can read (shapes, dtypes, scalar arguments, output shapes)."""

from __future__ import annotations

from math import prod

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zoo import llama, small

from torchscan import crawl_module, measure_flops, operator_cache
from torchscan.formulas.operators.functional import FUNCTIONAL_ESTIMATES
from torchscan.operator_cache import FormulaCache, signature
from torchscan.operators import build_formula_table

aten = torch.ops.aten


class CallLog(torch.utils._python_dispatch.TorchDispatchMode):
    """Every dispatched call with its arguments and output, for pricing each one directly (the reference)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.calls.append((func, args, kwargs or {}, out))
        return out


def logged(workload) -> list[tuple]:
    log = CallLog()
    with torch.no_grad(), log:
        workload()
    return log.calls


def reference_flops(calls: list[tuple], custom_mapping=None) -> dict[str, int]:
    """Operator name -> FLOPs with every call's formula evaluated on its own (no memo)."""
    table = build_formula_table(custom_mapping or {})
    totals: dict[str, int] = {}
    for func, args, kwargs, out in calls:
        formula = table.get(func._overloadpacket)
        flops = formula(*args, **kwargs, out_val=out) if formula is not None else None
        if flops is not None:
            name = str(func._overloadpacket)
            totals[name] = totals.get(name, 0) + flops
    return totals


def by_operator(report: dict) -> dict[str, int]:
    return {row["operator"]: row["flops"] for row in report["by_operator"]}


def conv_variants() -> None:
    x = torch.rand(1, 4, 9, 9)
    weight, grouped = torch.rand(4, 4, 3, 3), torch.rand(4, 2, 3, 3)
    for _ in range(3):
        F.conv2d(x, weight, stride=1)
        F.conv2d(x, weight, stride=2)
        F.conv2d(x, weight, stride=2, padding=1)
        F.conv2d(x, grouped, groups=2)
        F.conv2d(x.double(), weight.double(), stride=2)


def test_calls_differing_in_stride_groups_padding_or_dtype_never_share_a_result():
    calls = logged(conv_variants)
    convolutions = [call for call in calls if call[0]._overloadpacket is aten.convolution]
    keys = [signature(*call) for call in convolutions]
    assert None not in keys
    assert len(set(keys)) == 5  # five configurations, each seen three times
    assert keys[:5] == keys[5:10] == keys[10:]
    report = measure_flops(conv_variants)
    assert by_operator(report) == reference_flops(calls)
    assert report["total"]["status"] == "complete"


def only(calls: list[tuple], packet) -> tuple:
    (call,) = [call for call in calls if call[0]._overloadpacket is packet]
    return call


def test_scalar_arguments_alone_separate_signatures():
    """Equal shapes everywhere (input, weight, output), different stride or is_causal: different signatures."""
    x, weight = torch.rand(1, 4, 3, 3), torch.rand(4, 4, 3, 3)
    stride_one, stride_two = (only(logged(lambda s=s: F.conv2d(x, weight, stride=s)), aten.convolution)
                              for s in (1, 2))
    assert stride_one[3].shape == stride_two[3].shape
    assert signature(*stride_one) != signature(*stride_two)
    q = torch.rand(1, 2, 8, 4)
    causal, full = (logged(lambda c=c: F.scaled_dot_product_attention(q, q, q, is_causal=c)) for c in (True, False))
    attention = causal[-1][0]._overloadpacket
    assert signature(*only(causal, attention)) != signature(*only(full, attention))
    y = torch.rand(3)
    one, true, float_one = (signature(aten.add.Tensor, (y, y), {"alpha": alpha}, y) for alpha in (1, True, 1.0))
    assert len({one, true, float_one}) == 3  # equal as Python values, different arguments


def test_list_arguments_are_read_with_their_grouping_item_types_and_tensors():
    x = torch.rand(2, 3)
    assert signature(aten.view.default, (x, [3, 2]), {}, x) == signature(aten.view.default, (x, [3, 2]), {}, x)
    assert signature(aten.view.default, (x, [3, 2]), {}, x) != signature(aten.view.default, (x, (3, 2)), {}, x)
    assert signature(aten.view.default, (x, [6, 1]), {}, x) != signature(aten.view.default, (x, [6.0, 1]), {}, x)
    split = [signature(aten.add.Tensor, (first, second), {}, x) for first, second in (([1, 2], [3]), ([1], [2, 3]))]
    assert split[0] != split[1]  # the same items, grouped differently
    pieces = [signature(aten.cat.default, ([x, y],), {}, torch.cat([x, y])) for y in (x, x[:1], x.double())]
    assert None not in pieces and len(set(pieces)) == 3  # a list of tensors: each one's shape and dtype
    inner = [signature(aten.add.Tensor, (x, groups), {}, x) for groups in ([[1, 2], [3]], [[1], [2, 3]], [(1, 2), [3]])]
    assert None not in inner and len(set(inner)) == 3  # lists of lists are described item by item
    mixed = [signature(aten.add.Tensor, ([x, scalar],), {}, x) for scalar in (1, 2, 1.0)]
    assert None not in mixed and len(set(mixed)) == 3  # a tensor next to scalars: each scalar's type and value
    nested = torch.nested.nested_tensor([torch.rand(2), torch.rand(3)])
    assert signature(aten.cat.default, ([x, nested],), {}, x) is None  # no single shape: priced directly


def test_a_formula_that_reads_stride_is_evaluated_per_signature():
    evaluated = []

    def convolution_flops(x_shape, w_shape, bias, stride, *args, out_shape=None, **kwargs):
        evaluated.append(tuple(stride))
        return 10 * stride[0]

    x, weight = torch.rand(1, 4, 3, 3), torch.rand(4, 4, 3, 3)
    workload = lambda: [F.conv2d(x, weight, stride=s) for s in (1, 2, 1, 2, 1)]
    report = measure_flops(workload, custom_mapping={aten.convolution: convolution_flops})
    assert report["total"]["value"] == 3 * 10 + 2 * 20
    assert sorted(evaluated) == [(1, 1), (2, 2)]


def test_a_formula_that_reads_is_causal_is_evaluated_per_signature():
    """A caller formula whose result depends on ``is_causal``: causal and full calls keep their own counts."""
    evaluated = []

    def attention_flops(query, key, value, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs):
        evaluated.append(is_causal)
        return 1 if is_causal else 100

    q = torch.rand(1, 2, 8, 4)

    def workload():
        for _ in range(4):
            F.scaled_dot_product_attention(q, q, q, is_causal=True)
            F.scaled_dot_product_attention(q, q, q, is_causal=False)

    packet = logged(workload)[-1][0]._overloadpacket
    report = measure_flops(workload, custom_mapping={packet: attention_flops})
    assert by_operator(report)[str(packet)] == 4 * 1 + 4 * 100
    assert sorted(evaluated) == [False, True]  # one evaluation per signature, not per call


def test_output_shape_is_part_of_the_signature():
    """``nonzero``'s output shape depends on values, not on input shapes: equal inputs shapes, different counts."""
    sparse, dense = torch.tensor([0.0, 0.0, 1.0]), torch.tensor([1.0, 2.0, 3.0])
    mapping = {aten.nonzero: lambda input_shape, *, out_shape: prod(out_shape)}
    report = measure_flops(lambda: (torch.nonzero(sparse), torch.nonzero(dense)), custom_mapping=mapping)
    assert by_operator(report)["aten.nonzero"] == 1 + 3


def test_dtype_selects_the_convention():
    """Same shapes: float addition costs one FLOP per element, integer addition none."""
    floats, integers = torch.rand(5), torch.ones(5, dtype=torch.int64)
    report = measure_flops(lambda: [floats + floats, integers + integers, floats + floats])
    assert by_operator(report)["aten.add"] == 10
    assert {row["operator"]: row["calls"] for row in report["by_operator"]}["aten.add"] == 3


def test_caller_formulas_are_cached_per_analysis_only():
    evaluations = []
    per_element = [2]

    def sin_flops(input_shape, *, out_shape):
        evaluations.append(tuple(out_shape))
        return per_element[0] * prod(out_shape)

    x = torch.rand(3)
    workload = lambda: [torch.sin(x) for _ in range(10)]
    first = measure_flops(workload, custom_mapping={aten.sin: sin_flops})
    per_element[0] = 5  # what the formula answers changes between analyses
    second = measure_flops(workload, custom_mapping={aten.sin: sin_flops})
    assert first["total"]["value"] == 10 * 2 * 3 and second["total"]["value"] == 10 * 5 * 3
    assert evaluations == [(3,), (3,)]  # once per analysis


def test_raw_formulas_see_every_call():
    """A raw formula (``_get_raw``) receives the tensors and may read values: it is never memoized."""
    def value_flops(x, *, out_val=None):
        return int(x.sum())

    value_flops._get_raw = True
    ones, twos = torch.ones(3), torch.full((3,), 2.0)
    report = measure_flops(lambda: (torch.sin(ones), torch.sin(twos)), custom_mapping={aten.sin: value_flops})
    assert report["total"]["value"] == 3 + 6


def test_unreadable_arguments_are_priced_directly():
    nested = torch.nested.nested_tensor([torch.rand(2, 3), torch.rand(4, 3)])
    assert signature(aten.sin.default, (nested,), {}, nested) is None
    assert signature(aten.sin.default, (torch.rand(2), object()), {}, None) is None
    generator = torch.Generator().manual_seed(0)
    calls = logged(lambda: torch.rand(2, 3, generator=generator) * torch.rand(3, generator=generator))
    report = measure_flops(lambda: torch.rand(2, 3, generator=generator) * torch.rand(3, generator=generator))
    assert by_operator(report) == reference_flops(calls)


def test_a_full_memo_keeps_pricing_correctly(monkeypatch):
    monkeypatch.setattr(operator_cache, "MAX_SIGNATURES", 2)
    inputs = [torch.rand(n) for n in range(1, 8)]

    def workload():
        for x in inputs:
            torch.sin(x)
            torch.sin(x)

    report = measure_flops(workload, custom_mapping={aten.sin: lambda input_shape, *, out_shape: prod(out_shape)})
    assert report["total"]["value"] == 2 * sum(range(1, 8))


def test_functional_estimates_are_memoized_per_signature():
    """A module's own additions at two shapes: each signature's module-view estimate, not the first one's."""
    cache = FormulaCache(build_formula_table({}))
    small_sum, large_sum = (logged(lambda n=n: torch.rand(n) + torch.rand(n))[-1] for n in (2, 50))
    estimates = []
    for func, args, kwargs, out in (small_sum, large_sum, small_sum):
        plan = cache.plan(func)
        outcome = plan.fixed or cache.outcome(plan, args, kwargs, out)
        estimates.append(cache.functional_estimate(plan, outcome, args, kwargs, out))
    expected = [FUNCTIONAL_ESTIMATES[aten.add](args, kwargs, out) for _, args, kwargs, out in (small_sum, large_sum)]
    assert estimates == [expected[0], expected[1], expected[0]]
    assert expected[0] != expected[1]


class Residuals(nn.Module):
    """Direct work at two shapes (module view estimates it from the observed operators)."""

    def forward(self, x, y):
        return (x + x).sum() + (y * y).sum() + (x + x).sum()


def without_memo(monkeypatch, function):
    with monkeypatch.context() as patch:
        patch.setattr(operator_cache, "signature", lambda *args: None)
        return function()


@pytest.mark.parametrize("build", [
    lambda: (small.small_cnn(), (torch.rand(1, 3, 32, 32),), {}),
    lambda: (small.tiny_transformer(), *small.tiny_transformer_inputs()),
    lambda: (llama.llama_tiny(), *llama.llama_inputs(seq_len=16, vocab_size=256)),
    lambda: (Residuals(), (torch.rand(4), torch.rand(2, 3)), {}),
])
def test_reports_are_identical_with_and_without_the_memo(monkeypatch, build):
    torch.manual_seed(0)
    model, args, kwargs = build()
    memoized = crawl_module(model, args=args, kwargs=kwargs)
    direct = without_memo(monkeypatch, lambda: crawl_module(model, args=args, kwargs=kwargs))
    assert memoized == direct
