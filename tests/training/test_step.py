"""One training step analyzed (`torchscan.training.step`): totals against ``measure_flops`` of the same step, backward
attribution to layer calls, the model's state after the step (also after errors), frozen parameters, modes, meta."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torchscan_testing import checked
from zoo import llama

from torchscan import IncompleteAnalysisError, crawl_module, crawl_training_step, measure_flops
from torchscan.calls.meta_kernels import AcceleratorAttention

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def small_cnn(width: int = 8) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, width, 3), nn.BatchNorm2d(width), nn.ReLU(), nn.Conv2d(width, 4, 3),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 5))


def image() -> torch.Tensor:
    return torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))


def train(model: nn.Module, *args: Any, **options: Any) -> dict[str, Any]:
    return checked(crawl_training_step(model, args=args, **options))


def value(result: dict[str, Any]) -> Any:
    assert result["status"] == "complete", result
    return result["value"]


def manual_step(model: nn.Module, x: torch.Tensor, optimizer: Any = None) -> float:
    """``measure_flops`` of the same step written by hand, on a copy of the model."""
    twin = copy.deepcopy(model).train()
    parameters = [p for p in twin.parameters() if p.requires_grad]
    built = optimizer(parameters) if optimizer is not None else None

    def step() -> None:
        twin(x).sum().backward()
        if built is not None:
            built.step()
    return value(measure_flops(step)["total"])


# -- totals and attribution -------------------------------------------------------------------------------------------


def test_totals_equal_measure_flops_of_the_same_step() -> None:
    model, x = small_cnn(), image()
    report = train(model, x, optimizer="adamw")
    totals = report["training"]["totals"]
    assert value(totals["forward"]) == value(report["operator_flops"]["total"])
    assert value(totals["step"]) == manual_step(model, x, torch.optim.AdamW)
    assert value(totals["optimizer"]) > 0
    without = train(model, x)
    assert value(without["training"]["totals"]["step"]) == manual_step(model, x)
    assert without["training"]["totals"]["optimizer"]["status"] == "not_requested"


def test_a_callable_optimizer_gets_only_the_trainable_parameters() -> None:
    model, x = small_cnn(), image()

    def make(params: list[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=0.1)
    report = train(model, x, optimizer=make)
    assert report["training"]["optimizer"] == {"name": "callable", "type": "torch.optim.sgd.SGD",
                                               "implementation": "single_tensor", "counted_on": "meta"}
    assert value(report["training"]["totals"]["step"]) == manual_step(model, x, make)
    everything = value(report["training"]["totals"]["optimizer"])
    model[0].weight.requires_grad_(False)
    frozen = value(train(model, x, optimizer=make)["training"]["totals"]["optimizer"])
    assert everything - frozen == 2 * model[0].weight.numel()  # SGD without momentum: a multiply and an add


def test_the_layer_backward_and_the_buckets_add_up_to_the_backward_total() -> None:
    report = train(small_cnn(), image())
    totals = report["training"]["totals"]
    layers = report["training"]["layers"]
    direct = sum(value(layer["backward_flops"]["direct"]) for layer in layers)
    assert direct == value(totals["layers_backward"]) > 0
    assert value(totals["recomputation"]) == 0
    assert direct + value(totals["loss_backward"]) + value(totals["engine"]) == value(totals["backward"])
    root = next(layer for layer in layers if layer["path"] == "")
    assert value(root["backward_flops"]["inclusive"]) == direct
    by_path = {layer["path"]: value(layer["backward_flops"]["direct"]) for layer in layers}
    assert by_path["0"] > 0 and by_path["1"] > 0 and by_path["2"] > 0 and by_path["5"] > 0
    assert by_path["4"] == 0  # Flatten: a view, no backward work


class TwoHeads(nn.Module):
    """One hidden tensor feeds two consumers: the engine sums their gradients (work no node owns)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.left, self.right = nn.Linear(4, 6), nn.Linear(6, 3), nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.stem(x)
        return self.left(hidden) * self.right(hidden)


def test_gradient_accumulation_goes_to_the_engine_bucket_and_the_root_keeps_its_direct_work() -> None:
    model, x = TwoHeads(), torch.randn(5, 4)
    report = train(model, x)
    totals = report["training"]["totals"]
    assert value(totals["engine"]) == 5 * 6  # one add per element of the hidden gradient
    direct = {layer["path"]: value(layer["backward_flops"]["direct"]) for layer in report["training"]["layers"]}
    assert direct[""] == 2 * 5 * 3  # the product's backward: one multiply per element for each factor
    assert value(totals["backward"]) == sum(direct.values()) + value(totals["loss_backward"]) + value(totals["engine"])
    assert value(totals["step"]) == manual_step(model, x)


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(6, 6), nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(lambda y: self.second(self.first(y).tanh()), x, use_reentrant=False)


def test_module_calls_recomputed_under_checkpointing_are_shown_as_recomputation() -> None:
    model, x = nn.Sequential(nn.Linear(4, 6), Checkpointed(), nn.Linear(6, 2)), torch.randn(3, 4)
    report = train(model, x)
    totals = report["training"]["totals"]
    # the second linear's saved tensors are its input and weight: recomputation stops after the first linear
    assert value(totals["recomputation"]) == 2 * 3 * 6 * 6 + 3 * 6
    direct = sum(value(layer["backward_flops"]["direct"]) for layer in report["training"]["layers"])
    parts = ("loss_backward", "engine", "recomputation")
    assert value(totals["backward"]) == direct + sum(value(totals[name]) for name in parts)
    assert value(totals["step"]) == manual_step(model, x)


def test_widening_one_layer_moves_backward_flops_only_where_shapes_changed() -> None:
    narrow, wide = train(small_cnn(8), image()), train(small_cnn(16), image())
    flops = {name: {layer["path"]: value(layer["backward_flops"]["direct"]) for layer in report["training"]["layers"]}
             for name, report in (("narrow", narrow), ("wide", wide))}
    changed = {path for path in flops["narrow"] if flops["narrow"][path] != flops["wide"][path]}
    assert changed == {"0", "1", "2", "3"}  # the widened conv's output feeds 1, 2 and 3
    assert flops["narrow"]["5"] == flops["wide"]["5"]


def test_frozen_parameters_get_no_weight_gradient_work() -> None:
    model, x = small_cnn(), image()
    trainable = train(model, x)["training"]["layers"]
    model[3].weight.requires_grad_(False)
    model[3].bias.requires_grad_(False)
    frozen = train(model, x)["training"]["layers"]
    assert model[3].weight.grad is None

    def conv(layers: list[dict[str, Any]]) -> int:
        return next(value(layer["backward_flops"]["direct"]) for layer in layers if layer["path"] == "3")
    assert conv(frozen) < conv(trainable)


def test_the_default_loss_and_a_callable_loss_are_said() -> None:
    model, x = small_cnn(), image()
    default = train(model, x)["training"]
    assert default["loss"]["source"] == "default" and "sum" in default["loss"]["description"]
    target = torch.tensor([0, 1])
    custom = train(model, x, loss=lambda out: nn.functional.cross_entropy(out, target))["training"]
    assert custom["loss"]["source"] == "callable"
    assert value(custom["totals"]["loss_forward"]) > value(default["totals"]["loss_forward"])
    assert value(custom["totals"]["loss_backward"]) > 0


# -- state ------------------------------------------------------------------------------------------------------------


def snapshot(model: nn.Module) -> dict[str, Any]:
    return {
        "state": {name: tensor.clone() for name, tensor in model.state_dict().items()},
        "grads": {name: None if p.grad is None else p.grad.clone() for name, p in model.named_parameters()},
        "grad_ids": [id(p.grad) for p in model.parameters()],
        "flags": [module.training for module in model.modules()],
        "hooks": [len(module._forward_hooks) + len(module._forward_pre_hooks) for module in model.modules()],
        "rng": torch.get_rng_state(),
    }


def assert_same(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before["state"].keys() == after["state"].keys()
    assert all(torch.equal(before["state"][name], after["state"][name]) for name in before["state"])
    assert before["grad_ids"] == after["grad_ids"]
    for name, grad in before["grads"].items():
        assert (grad is None and after["grads"][name] is None) or torch.equal(grad, after["grads"][name])
    assert before["flags"] == after["flags"] and before["hooks"] == after["hooks"] and sum(after["hooks"]) == 1
    assert torch.equal(before["rng"], after["rng"])


def dropout_model() -> nn.Sequential:
    model = small_cnn()
    model.append(nn.Dropout(0.5))
    model[0].register_forward_hook(lambda module, args, output: None)  # the user's hook stays
    model.eval()
    model(image()).sum().backward()  # existing gradients must survive
    return model


@pytest.mark.parametrize("as_device", [None, "cpu"])
def test_the_model_is_left_as_it_was(as_device: str | None) -> None:
    model = dropout_model()
    before = snapshot(model)
    report = train(model, image(), optimizer="sgd", as_device=as_device)
    assert_same(before, snapshot(model))
    assert report["context"]["execution"] == {"mode": "train", "grad": "enabled", "forward_passes": 1}
    assert report["context"]["prior_training"]["root"] is False


class Boom(RuntimeError):
    pass


def test_the_model_is_left_as_it_was_when_the_loss_raises() -> None:
    model = dropout_model()
    before = snapshot(model)

    def loss(output: torch.Tensor) -> torch.Tensor:
        raise Boom("loss")
    with pytest.raises(Boom):
        crawl_training_step(model, args=(image(),), loss=loss)
    assert_same(before, snapshot(model))


def test_the_model_is_left_as_it_was_when_the_forward_raises() -> None:
    model, wrong = dropout_model(), torch.zeros(2, 5, 8, 8)
    before = snapshot(model)
    with pytest.raises(RuntimeError):
        crawl_training_step(model, args=(wrong,))
    assert_same(before, snapshot(model))


def test_keep_modes_keeps_a_frozen_batchnorm_in_eval() -> None:
    model, x = small_cnn(), image()
    model.train()
    model[1].eval()
    kept = train(model, x, keep_modes=True)
    assert kept["context"]["execution"]["mode"] == "kept"
    assert model[1].training is False and model[0].training is True
    trained = train(model, x)
    bn = {name: next(value(layer["backward_flops"]["direct"]) for layer in report["training"]["layers"]
                     if layer["path"] == "1") for name, report in (("kept", kept), ("train", trained))}
    assert bn["kept"] != bn["train"]  # eval BatchNorm's backward is a plain scale, not batch statistics


# -- meta, strictness, arguments --------------------------------------------------------------------------------------


def test_a_meta_llama_step_is_complete_and_attributed() -> None:
    with torch.device("meta"):
        model = llama.llama_tiny()
    args, _ = llama.llama_inputs(seq_len=16, vocab_size=256, device="meta")
    report = train(model, *args, optimizer="adamw", strict=True)
    totals = report["training"]["totals"]
    assert all(result["status"] == "complete" for name, result in totals.items()), totals
    assert report["training"]["devices"] == ["meta"]
    forward, backward = value(totals["forward"]), value(totals["backward"])
    assert 1.5 * forward < backward < 2.5 * forward
    assert value(crawl_module(model, args=args)["operator_flops"]["total"]) == forward
    with AcceleratorAttention():  # on meta the step's attention runs CUDA's fused kernel (meta_kernels)
        assert value(totals["step"]) == manual_step(model, args[0], torch.optim.AdamW)
    math = train(model, *args, optimizer="adamw", meta_kernels="math")["training"]["totals"]["step"]
    assert value(math) == manual_step(model, args[0], torch.optim.AdamW)


class OpaqueBackward(torch.autograd.Function):
    """A counted forward (a multiply) whose backward runs an operator no formula knows."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.special.bessel_j0(x)


class Scaled(nn.Module):
    """Not a leaf: the module view prices its own multiply as direct work."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return OpaqueBackward.apply(self.inner(x))


def test_strict_names_the_uncounted_backward_operators_and_their_calls() -> None:
    model, x = nn.Sequential(nn.Linear(3, 3), Scaled()), torch.randn(2, 3)
    report = train(model, x)
    assert report["operator_flops"]["total"]["status"] == "complete"
    assert report["training"]["totals"]["backward"]["status"] == "partial"
    rows = {row["path"]: row["backward_flops"] for row in report["training"]["layers"]}
    assert rows["1"]["direct"]["status"] == rows[""]["inclusive"]["status"] == "partial"
    assert rows["0"]["direct"]["status"] == "complete"
    with pytest.raises(IncompleteAnalysisError, match=r"aten\.special_bessel_j0 in the backward of the layer "
                       r"calls 1#0"):
        crawl_training_step(model, args=(x,), strict=True)


def test_lazy_parameters_materialize_and_lazy_buffers_are_refused() -> None:
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU(), nn.Linear(4, 2))
    report = train(model, torch.randn(2, 3), optimizer="sgd")
    assert report["training"]["totals"]["step"]["status"] == "complete" and model[0].weight.shape == (4, 3)
    lazy = nn.Sequential(nn.Conv2d(3, 4, 3), nn.LazyBatchNorm2d())
    with pytest.raises(ValueError, match=r"uninitialized lazy buffers \(1\.running_mean"):
        crawl_training_step(lazy, args=(torch.randn(2, 3, 6, 6),))
    assert isinstance(lazy[1].running_mean, nn.parameter.UninitializedBuffer)


@pytest.mark.parametrize(("options", "error", "match"), [
    ({"optimizer": "lion"}, ValueError, "optimizer must be one of"),
    ({"loss": 3}, TypeError, "loss must be a callable"),
    ({"keep_modes": 1}, TypeError, "keep_modes must be a bool"),
    ({"loss": lambda out: out}, TypeError, "loss must return a one-element tensor"),
    ({"optimizer": lambda params: 3}, TypeError, "optimizer must build a torch.optim.Optimizer"),
])
def test_bad_arguments_name_the_argument(options: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        crawl_training_step(small_cnn(), args=(image(),), **options)
