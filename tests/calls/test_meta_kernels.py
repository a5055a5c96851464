"""``meta_kernels``: on meta, ``scaled_dot_product_attention`` runs as the fused kernel CUDA would pick (flash for
16-bit inputs without a mask, memory-efficient with a mask or in float32) unless ``meta_kernels="math"`` asks for
meta's own math path. The fused operator reaches autograd, the recorder, the FLOP formulas and the memory trace; no
score matrix is allocated; the routing is gone after every analysis, also after an error."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from torchscan import cost_curve, crawl_module, crawl_training_step
from torchscan.calls import meta_kernels
from torchscan.calls.meta_kernels import AcceleratorAttention, attention_call, cuda_kernel

B, H, L, D = 1, 2, 256, 16
FLASH, EFFICIENT = "aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_efficient_attention"


class Attend(nn.Module):
    """Nothing but ``scaled_dot_product_attention`` of its inputs (keyword options forwarded)."""

    def __init__(self, **options: Any) -> None:
        super().__init__()
        self.options = options

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: Any = None) -> torch.Tensor:
        return functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, **self.options)


class Block(nn.Module):
    """A projection, causal attention and an output projection: trainable, on meta."""

    def __init__(self, width: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, length, width = tokens.shape
        query, key, value = self.qkv(tokens).view(batch, length, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        attended = functional.scaled_dot_product_attention(query, key, value, is_causal=True)
        return self.out(attended.transpose(1, 2).reshape(batch, length, width))


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, tokens, use_reentrant=False)


def qkv(dtype: torch.dtype = torch.bfloat16, heads: int = H, kv_heads: int = H, length: int = L, keys: int = L,
        dim: int = D) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (torch.empty(B, heads, length, dim, dtype=dtype, device="meta"),
            torch.empty(B, kv_heads, keys, dim, dtype=dtype, device="meta"),
            torch.empty(B, kv_heads, keys, dim, dtype=dtype, device="meta"))


def on_meta(build: Any, dtype: torch.dtype = torch.float32) -> nn.Module:
    with torch.device("meta"):
        return build().to(dtype)


def operators(report: dict[str, Any], section: dict[str, Any] | None = None) -> dict[str, int]:
    """FLOPs by operator name, of the forward or of ``section`` (a training section)."""
    rows = (section or report)["operator_flops"]["by_operator"]
    return {row["operator"]: row["flops"] for row in rows}


def no_mode_in_force() -> bool:
    return not torch._C._is_torch_function_mode_enabled() and not torch.overrides._get_current_function_mode_stack()


# -- which kernel --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("dtype", "mask", "operator", "kernel"), [
    (torch.bfloat16, False, FLASH, "flash"), (torch.float16, False, FLASH, "flash"),
    (torch.float32, False, EFFICIENT, "efficient"), (torch.bfloat16, True, EFFICIENT, "efficient")])
def test_on_meta_the_fused_kernel_cuda_picks_is_dispatched(dtype: torch.dtype, mask: bool, operator: str,
                                                           kernel: str) -> None:
    query, key, value = qkv(dtype)
    boolean = torch.ones(L, L, dtype=torch.bool, device="meta").tril() if mask else None
    report = crawl_module(Attend(), args=(query, key, value, boolean), memory=True)
    ran = operators(report)
    assert operator in ran and "aten.bmm" not in ran and "aten._safe_softmax" not in ran
    assert report["memory"]["attention_kernel"]["name"] == kernel
    assert report["context"]["meta_kernels"] == "accelerator"
    assert "assumed on meta (meta_kernels='accelerator'" in report["memory"]["attention_kernel"]["reason"]
    assert "torch.utils.flop_counter" in report["memory"]["attention_kernel"]["reason"]


def test_no_score_matrix_is_allocated_and_the_math_path_holds_the_scores_by_hand() -> None:
    query, key, value = qkv(torch.bfloat16)
    fused = crawl_module(Attend(), args=(query, key, value), memory=True)["memory"]
    math = crawl_module(Attend(), args=(query, key, value), memory=True, meta_kernels="math")["memory"]
    output, log_sum_exp = B * H * L * D * 2, B * H * L * 4  # bfloat16 output, float32 log-sum-exp per query row
    philox_and_unused = 2 * 8 + 8  # the kernel's seed and offset (two int64) and its unused int64 scalar
    assert fused["peak_above_start"]["value"] == output + log_sum_exp + philox_and_unused
    scores = B * H * L * L * 4  # the math path computes in float32: the scores and their softmax are both live
    assert math["peak_above_start"]["value"] - fused["peak_above_start"]["value"] >= 2 * scores
    assert math["activations"] == fused["activations"]  # fvcore's convention counts the same two products


def test_the_forward_flops_are_the_math_paths_products_plus_one_scaling_and_the_softmax() -> None:
    query, key, value = qkv(torch.bfloat16)
    fused = operators(crawl_module(Attend(), args=(query, key, value)))
    math = operators(crawl_module(Attend(), args=(query, key, value), meta_kernels="math"))
    scaling = B * H * L * D  # q * scale once per query element; the math path scales q and k (its aten.mul)
    assert fused[FLASH] == math["aten.bmm"] + math["aten._safe_softmax"] + scaling
    assert math["aten.mul"] == 2 * scaling


def test_flash_pads_a_head_dimension_to_a_multiple_of_8_with_the_unpadded_scale() -> None:
    query, key, value = qkv(torch.bfloat16, dim=12)
    with AcceleratorAttention():
        output = functional.scaled_dot_product_attention(query, key, value)
    assert output.shape == (B, H, L, 12) and output.dtype == torch.bfloat16
    report = crawl_module(Attend(), args=(query, key, value))
    assert FLASH in operators(report)
    assert {"operator": "aten.constant_pad_nd", "calls": 3, "reason": "copy"} in report["operator_flops"]["ignored"]


@pytest.mark.parametrize(("inputs", "options", "expected"), [
    (qkv(torch.bfloat16, heads=8, kv_heads=2), {"enable_gqa": True}, "flash_attention"),  # grouped heads, natively
    (qkv(torch.float32, heads=8, kv_heads=2), {"enable_gqa": True}, "efficient_attention"),
    (qkv(torch.bfloat16, heads=8, kv_heads=2), {}, None),  # different heads without enable_gqa: PyTorch's error
    (qkv(torch.bfloat16, length=64, keys=128), {"is_causal": True}, "efficient_attention"),  # flash: square only
    (qkv(torch.bfloat16, dim=512), {}, "efficient_attention"),  # flash: head dimension at most 256
    (qkv(torch.float32, dim=6), {}, None),  # efficient: float32 features aligned to 4
    (qkv(torch.float64), {}, None),  # neither kernel takes float64
    (tuple(t[0] for t in qkv(torch.bfloat16)), {}, None),  # three-dimensional inputs: the math path
])
def test_the_choice_mirrors_cudas_constraints(inputs: tuple, options: dict[str, Any], expected: str | None) -> None:
    call = attention_call(inputs, options)
    kernel = None if call is None else cuda_kernel(call)
    assert (None if kernel is None else kernel.__name__) == expected


def test_the_runtime_switches_of_sdpa_kernel_are_honoured() -> None:
    call = attention_call(qkv(torch.bfloat16), {})
    assert call is not None and cuda_kernel(call) is meta_kernels.flash_attention
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        assert cuda_kernel(call) is meta_kernels.efficient_attention
    with sdpa_kernel([SDPBackend.MATH]):
        assert cuda_kernel(call) is None


def test_calls_off_meta_run_unchanged_and_report_no_meta_kernels() -> None:
    query, key, value = (torch.randn(B, H, 32, D) for _ in range(3))
    report = crawl_module(Attend(), args=(query, key, value), memory=True)
    assert "meta_kernels" not in report["context"]
    assert "aten._scaled_dot_product_flash_attention_for_cpu" in operators(report)  # CPU's own fused kernel
    on_stand_ins = crawl_module(Attend(), args=qkv(torch.bfloat16), memory=True, as_device="cpu")
    assert "meta_kernels" not in on_stand_ins["context"]  # as_device keeps its device's choices


# -- math reproduces the analysis without the routing -----------------------------------------------------------------


def without_meta_kernels(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` as an analysis without the routing words it: no ``context.meta_kernels``, the usual reasons."""
    report = copy.deepcopy(report)
    assert report["context"].pop("meta_kernels") == "math"
    for memory in (report.get("memory"), report.get("training", {}).get("memory")):
        if memory is not None:
            assert "meta_kernels='math'" in memory["attention_kernel"]["reason"]
            memory["attention_kernel"]["reason"] = meta_kernels_free_reason()
    return report


def meta_kernels_free_reason() -> str:
    from torchscan.memory.forward import KERNEL_REASONS

    return KERNEL_REASONS["math"]


@contextmanager
def routing_unknown(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The analysis as it ran before ``meta_kernels`` existed: it never learns that it runs on meta."""
    with monkeypatch.context() as patch:
        patch.setattr("torchscan.crawler.runs_on_meta", lambda model, args, kwargs: False)
        yield


def test_meta_kernels_math_reproduces_the_analysis_without_the_routing(monkeypatch: pytest.MonkeyPatch) -> None:
    model, tokens = on_meta(Block, torch.bfloat16), torch.empty(2, 128, 64, dtype=torch.bfloat16, device="meta")
    math = crawl_module(model, args=(tokens,), memory=True, meta_kernels="math")
    step = crawl_training_step(model, args=(tokens,), memory=True, optimizer="adamw", meta_kernels="math")
    with routing_unknown(monkeypatch):
        before = crawl_module(model, args=(tokens,), memory=True)
        step_before = crawl_training_step(model, args=(tokens,), memory=True, optimizer="adamw")
    assert "meta_kernels" not in before["context"]
    assert without_meta_kernels(math) == before  # every number, every layer, every operator row
    assert without_meta_kernels(step) == step_before


# -- training ------------------------------------------------------------------------------------------------------


def test_a_training_steps_backward_runs_the_fused_backward() -> None:
    model, tokens = on_meta(Block, torch.bfloat16), torch.empty(2, 128, 64, dtype=torch.bfloat16, device="meta")
    report = crawl_training_step(model, args=(tokens,), memory=True, optimizer="adamw")
    backward = operators(report, report["training"])
    assert "aten._scaled_dot_product_flash_attention_backward" in backward and "aten.bmm" not in backward
    assert report["training"]["memory"]["attention_kernel"]["name"] == "flash"
    math = crawl_training_step(model, args=(tokens,), memory=True, optimizer="adamw", meta_kernels="math")
    assert report["training"]["memory"]["peak"]["value"] < math["training"]["memory"]["peak"]["value"]
    assert no_mode_in_force()


def test_a_checkpointed_forward_is_recomputed_with_the_same_fused_kernel() -> None:
    """Autograd runs the backward without the caller's torch function modes: the tracer's re-run calls keep it."""
    model, tokens = on_meta(Checkpointed, torch.bfloat16), torch.empty(2, 64, 64, dtype=torch.bfloat16, device="meta")
    report = crawl_training_step(model, args=(tokens,))
    backward = operators(report, report["training"])
    assert FLASH in backward and "aten._scaled_dot_product_flash_attention_backward" in backward
    assert report["training"]["totals"]["recomputation"]["value"] > 0
    assert no_mode_in_force()


def test_grouped_heads_train_through_the_memory_efficient_kernel() -> None:
    """float32 with fewer key/value heads: the memory-efficient kernel, whose meta backward needs the heads repeated."""
    query, key, value = qkv(torch.float32, heads=8, kv_heads=2)
    query.requires_grad_(), key.requires_grad_(), value.requires_grad_()
    with AcceleratorAttention():
        output = functional.scaled_dot_product_attention(query, key, value, enable_gqa=True)
    output.sum().backward()
    assert output.grad_fn.name() == "ScaledDotProductEfficientAttentionBackward0"
    assert key.grad is not None and key.grad.shape == key.shape and value.grad.shape == value.shape


# -- the mode is scoped ------------------------------------------------------------------------------------------------


class Raises(nn.Module):
    def forward(self, query: torch.Tensor) -> torch.Tensor:
        functional.scaled_dot_product_attention(query, query, query)
        raise RuntimeError("the forward failed")


def test_the_routing_is_gone_after_an_analysis_also_after_an_error() -> None:
    query = qkv(torch.bfloat16)[0]
    crawl_module(Attend(), args=qkv(torch.bfloat16))
    assert no_mode_in_force()
    with pytest.raises(RuntimeError, match="the forward failed"):
        crawl_module(Raises(), args=(query,))
    assert no_mode_in_force()
    with pytest.raises(RuntimeError, match="the forward failed"):
        crawl_training_step(Raises(), args=(query.clone().requires_grad_(),))
    assert no_mode_in_force()


@pytest.mark.parametrize("bad", ["flash", "MATH", None, 1])
def test_a_bad_meta_kernels_value_is_refused_naming_the_argument(bad: Any) -> None:
    expected = ("meta_kernels must be one of 'accelerator', 'math' (on meta, the attention kernel an accelerator "
                f"would run, or meta's own math path), got {bad!r}")
    model, tokens = on_meta(Block), torch.empty(1, 8, 64, device="meta")
    for analyze in (lambda: crawl_module(model, args=(tokens,), meta_kernels=bad),
                    lambda: crawl_training_step(model, args=(tokens,), meta_kernels=bad),
                    lambda: cost_curve(model, [8], lambda size: ((tokens,), {}), meta_kernels=bad)):
        with pytest.raises(ValueError) as caught:
            analyze()
        assert str(caught.value) == expected


def test_an_analysis_runs_on_meta_when_any_parameter_buffer_or_call_tensor_is_a_meta_tensor() -> None:
    """Nested modules, buffers, children and parameters registered as None, the call's own tensors."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.BatchNorm1d(2), nn.Identity()))
    model.add_module("empty", None)
    model[0].register_parameter("unused", None)
    assert not meta_kernels.runs_on_meta(model, (torch.zeros(1, 2),), {})
    assert meta_kernels.runs_on_meta(model, (), {"x": [torch.zeros(1, 2, device="meta")]})
    model[1][0].register_buffer("running_mean", torch.zeros(2, device="meta"))
    assert meta_kernels.runs_on_meta(model, (torch.zeros(1, 2),), {})
    model[1][0].register_buffer("running_mean", torch.zeros(2))
    model[1][1].weight = nn.Parameter(torch.zeros(2, device="meta"))
    assert meta_kernels.runs_on_meta(model, (torch.zeros(1, 2),), {})
