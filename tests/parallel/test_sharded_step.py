"""`sharded_step` against measurement: the steady-state per-device peak of a sharded AdamW step, analyzed on fake
tensors, equals (within 1%) the measured absolute peak of the same plan's third step on real CPU tensors over the
same fake process group; the collectives observed equal the plan's closed form; nothing of the caller's changes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from sharded_models import MODELS, adamw, llama, llama_call, measured_peak, mlp, mlp_call, storage_bytes
from torch.overrides import _get_current_function_mode_stack

from torchscan.parallel.memory import CATEGORIES
from torchscan.parallel.step import sharded_step
from torchscan.results import validation_error

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
BF16 = {"param_dtype": torch.bfloat16}
TOLERANCE = 0.01


def analyze(model: str, plan: dict[str, Any], **options: Any) -> dict[str, Any]:
    build, call = MODELS[model]
    args, kwargs, loss = call()
    return sharded_step(build(), args, kwargs, loss, adamw, plan, **options)


def assert_matches_measurement(model: str, plan: dict[str, Any], **options: Any) -> dict[str, Any]:
    build, call = MODELS[model]
    section = analyze(model, plan, **options)
    measured = measured_peak(build, call(), plan, **options)
    analyzed = section["per_device"]["peak"]
    assert analyzed["status"] == "complete"
    assert abs(analyzed["value"] - measured) <= TOLERANCE * measured, (analyzed["value"], measured)
    collectives = section["collectives"]
    assert collectives["observed"] == collectives["formula"] and collectives["matches"]
    return section


#: (world size, strategy, precision) for the MLP; the Llama gets the other half of the 12 combinations. Each half
#: covers every pair of values (world size x strategy, world size x precision, strategy x precision), and the two
#: together cover every combination once (``benchmarks/sharded_accuracy.py`` runs the full product on both).
MLP_HALF = [(2, "fsdp", "fp32"), (2, "fsdp_no_reshard", "bf16"), (4, "fsdp", "bf16"), (4, "fsdp_no_reshard", "fp32"),
            (8, "fsdp", "bf16"), (8, "fsdp_no_reshard", "fp32")]
PRECISIONS: dict[str, dict[str, Any] | None] = {"fp32": None, "bf16": BF16}


def _sweep() -> list[Any]:
    """Both models at world sizes 2, 4 and 8, fsdp and fsdp_no_reshard, with and without bf16 parameters."""
    cases = []
    for size in (2, 4, 8):
        for strategy in ("fsdp", "fsdp_no_reshard"):
            for name, precision in PRECISIONS.items():
                model = "mlp" if (size, strategy, name) in MLP_HALF else "llama"
                cases.append(pytest.param(model, size, strategy, precision, id=f"{model}-{strategy}-x{size}-{name}"))
    return cases


@pytest.mark.sweep
@pytest.mark.parametrize(("model", "world_size", "strategy", "precision"), _sweep())
def test_the_steady_state_peak_matches_the_measured_third_step(model: str, world_size: int, strategy: str,
                                                                precision: dict[str, Any] | None) -> None:
    plan: dict[str, Any] = {"strategy": strategy, "world_size": world_size}
    if precision is not None:
        plan["mixed_precision"] = precision
    assert_matches_measurement(model, plan)


@pytest.mark.parametrize("plan", [{"strategy": "hsdp", "world_size": 8, "shard_group_size": 4},
                                  {"strategy": "ddp", "world_size": 4, "mixed_precision": {"param_dtype": "bf16"}}],
                         ids=["hsdp-x8-group4", "ddp-x4-bf16"])
def test_replicated_strategies_match_the_measured_step_and_all_reduce(plan: dict[str, Any]) -> None:
    section = assert_matches_measurement("mlp", plan)
    observed = section["collectives"]["observed"]
    assert observed["all_reduce"]["count"] == 4  # one per block; the root holds no parameter
    assert (observed["all_gather"]["count"] == 0) == (plan["strategy"] == "ddp")


def test_activation_checkpointing_matches_the_measured_step_and_saves_less() -> None:
    plan = {"strategy": "fsdp", "world_size": 2}
    checkpointed = assert_matches_measurement("llama", plan, activation_checkpointing=True)
    plain = analyze("llama", plan)
    saved = checkpointed["per_device"]["at_peak"]["saved_activations"]["value"]
    assert saved < plain["per_device"]["at_peak"]["saved_activations"]["value"]
    assert checkpointed["activation_checkpointing"] and checkpointed["units"] == {"count": 2,
                                                                                 "types": ["LlamaDecoderLayer"]}


def test_the_section_breaks_the_peak_down_and_holds_the_first_step() -> None:
    section = analyze("mlp", {"strategy": "fsdp", "world_size": 8})
    device = section["per_device"]
    for result in (device["peak"], device["peak_above_start"], *device["at_peak"].values(),
                   *device["first_step"]["at_peak"].values()):
        assert validation_error(result, "bytes") is None, result
    assert list(device["at_peak"]) == list(CATEGORIES)
    at_peak = {name: result["value"] for name, result in device["at_peak"].items()}
    assert device["peak"]["value"] == sum(at_peak.values())
    start = {name: result["value"] for name, result in device["at_start"].items()}
    assert device["peak"]["value"] == sum(start.values()) + device["peak_above_start"]["value"]
    # 4 blocks of 525,568 float32 elements, 1/8 each; AdamW's two moments and one step counter per tensor
    assert start["sharded_parameters"] == 4 * 525_568 * 4 // 8
    assert start["optimizer_state"] == 2 * start["sharded_parameters"] + 16 * 4
    assert device["phase_at_peak"] in ("forward", "backward", "optimizer") and device["peak_operator"]
    first = device["first_step"]
    assert first["at_start"]["optimizer_state"]["value"] == 0
    assert section["plan"]["strategy"] == "fsdp" and section["rank"] == 0 and section["units"]["count"] == 4


def test_a_meta_model_is_analyzed_like_the_real_one() -> None:
    """With the same optimizer implementation; a named one runs CPU's single-tensor AdamW for a CPU model and an
    accelerator's ``foreach`` for a meta one (which sizes an accelerator run)."""
    args, kwargs, loss = mlp_call()
    plan = {"strategy": "fsdp", "world_size": 4}

    def single_tensor(parameters: list[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.AdamW(parameters, foreach=False)

    real = sharded_step(mlp(), args, kwargs, loss, single_tensor, plan)
    with torch.device("meta"):
        meta = mlp()
    analyzed = sharded_step(meta, args, kwargs, loss, single_tensor, plan)
    assert analyzed["per_device"] == real["per_device"]
    assert analyzed["stand_ins"]["model_devices"] == ["meta"]
    assert sharded_step(meta, args, kwargs, loss, "adamw", plan)["optimizer_implementation"] == "foreach"
    assert real["optimizer_implementation"] == "single_tensor"


class Uneven(torch.nn.Module):
    """Rows that do not divide by 4 ranks: torch.chunk gives ranks 0-2 three rows of 10 and rank 3 one."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(10, 10) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


#: CPU's ``_chunk_cat`` pads uneven gradients into copies inside the operator (a kernel workspace, which the trace
#: does not count: CUDA's kernel writes the padded layout directly): at most one unit's padded gradients, 12 x 10 + 12
#: float32 elements here.
CHUNK_CAT_WORKSPACE = (12 * 10 + 12) * 4


def test_rank_zero_is_the_largest_rank_and_any_rank_matches_its_measurement() -> None:
    plan = {"strategy": "fsdp", "world_size": 4}
    x = torch.randn(3, 10)
    peaks = {}
    for rank in (0, 3):
        section = sharded_step(Uneven(), (x,), None, None, adamw, plan, rank=rank)
        peaks[rank] = section["per_device"]["peak"]["value"]
        measured = measured_peak(Uneven, ((x,), {}, None), plan, rank=rank)
        assert 0 <= measured - peaks[rank] <= CHUNK_CAT_WORKSPACE, (rank, peaks[rank], measured)
    assert peaks[0] > peaks[3]
    assert sharded_step(Uneven(), (x,), None, None, adamw, plan)["rank"] == 0


def _failing_loss(output: Any) -> torch.Tensor:
    raise RuntimeError("the loss failed")


@pytest.mark.parametrize("fails", [False, True], ids=["success", "error"])
def test_the_callers_model_world_and_device_are_unchanged(fails: bool) -> None:
    model = llama()
    args, kwargs, loss = llama_call()
    before = {name: (tensor, tensor.detach().clone()) for name, tensor in model.state_dict(keep_vars=True).items()}
    parameters = list(model.parameters())
    device, resize = torch.get_default_device(), vars(torch.UntypedStorage).get("resize_")
    modes = list(_get_current_function_mode_stack())
    plan = {"strategy": "fsdp", "world_size": 2}
    if fails:
        with pytest.raises(RuntimeError, match="the loss failed"):
            sharded_step(model, args, kwargs, _failing_loss, adamw, plan)
    else:
        sharded_step(model, args, kwargs, loss, adamw, plan)
    assert not dist.is_initialized()
    assert torch.get_default_device() == device and vars(torch.UntypedStorage).get("resize_") is resize
    assert list(_get_current_function_mode_stack()) == modes and torch._C._len_torch_dispatch_stack() == 0
    assert list(model.parameters()) == parameters and all(p.grad is None for p in parameters)
    for name, tensor in model.state_dict(keep_vars=True).items():
        assert tensor is before[name][0] and torch.equal(tensor, before[name][1]), name
    assert type(model).__name__ == "LlamaForCausalLM" and model.training is True


def test_a_live_process_group_is_refused_and_left_alone() -> None:
    dist.init_process_group("fake", rank=0, world_size=2)
    try:
        with pytest.raises(RuntimeError, match="a default process group exists already"):
            analyze("mlp", {"strategy": "fsdp", "world_size": 8})
        assert dist.is_initialized() and dist.get_world_size() == 2
    finally:
        dist.destroy_process_group()


def test_the_optimizer_and_plan_are_checked() -> None:
    args, kwargs, loss = mlp_call()
    with pytest.raises(ValueError, match="optimizer must be one of"):
        sharded_step(mlp(), args, kwargs, loss, "lion", {"strategy": "fsdp", "world_size": 2})
    with pytest.raises(ValueError, match="needs a plan"):
        sharded_step(mlp(), args, kwargs, loss, "adamw", None)
    with pytest.raises(TypeError, match="must build a torch.optim.Optimizer"):
        sharded_step(mlp(), args, kwargs, loss, lambda params: None, {"strategy": "fsdp", "world_size": 2})
    assert not dist.is_initialized()


def test_storage_bytes_counts_each_storage_once() -> None:
    base = torch.zeros(8)
    assert storage_bytes([base, base[:4], base.view(2, 4)]) == 32
