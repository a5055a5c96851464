"""Backward attribution by creation: every autograd node belongs to the innermost layer call that was open when the
forward created it, whether the call's own work ran before, after or between its inner calls; the ``engine`` bucket
keeps only the engine's own work (gradients summed for a tensor with several consumers, ``AccumulateGrad``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from third_party_models import RUNS
from torch import nn
from torchscan_testing import backward_flops

from torchscan import crawl_training_step
from torchscan.operators import OperatorScope
from torchscan.training import section

SHAPE = (4, 32, 16)


def work(tensor: torch.Tensor) -> torch.Tensor:
    """A call's own work: ``tensor`` has three consumers, so autograd sums its gradients twice."""
    return torch.tanh(tensor) @ tensor.transpose(1, 2) @ tensor


class Before(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(work(x))


class After(Before):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return work(self.lin(x))


class Between(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(work(self.a(x)))


class Wrap(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


@pytest.mark.parametrize("inner", [Before, After, Between])
def test_a_calls_own_backward_is_its_own_wherever_it_ran(inner: type[nn.Module]) -> None:
    by_hand = backward_flops(work, torch.randn(*SHAPE, requires_grad=True))  # the work alone, its sums apart
    sums = by_hand.pop("aten.add")
    report = crawl_training_step(Wrap(inner()), args=(torch.randn(*SHAPE, requires_grad=True),))
    training = report["training"]
    direct = {layer["path"]: layer["backward_flops"]["direct"]["value"] for layer in training["layers"]}
    assert direct["inner"] == sum(by_hand.values())  # bmm and tanh_backward: 530,432
    assert direct[""] == 0
    assert training["totals"]["engine"]["value"] == sums == 2 * 4 * 32 * 16
    assert training["totals"]["layers_backward"]["value"] + sums == training["totals"]["backward"]["value"]


class EngineOperators(OperatorScope):
    """The engine bucket, keeping the operators it counted."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def add(self, outcome: Any) -> None:
        self.seen.add(str(outcome.packet))
        super().add(outcome)


#: The engine's own operators: the backward's seed gradient, gradient sums, and what AccumulateGrad runs.
ENGINE_WORK = {"aten.ones_like", "aten.add", "aten.add_", "aten.detach", "aten.copy_", "aten.clone",
               "aten.zeros_like", "aten._to_copy", "aten.new_empty_strided", "aten.empty_like"}


@pytest.mark.parametrize("run", ["transformers-ViT-sdpa-cpu", "transformers-BERT-sdpa-cpu",
                                 "transformers-Llama-sdpa-cpu"])
def test_the_engine_bucket_holds_only_gradient_sums_and_accumulation(run: str, monkeypatch: Any) -> None:
    case, device, variant = RUNS[run]
    engines: list[EngineOperators] = []
    phases_init = section.Phases.__init__

    def recording(self: section.Phases, *args: Any, **kwargs: Any) -> None:
        phases_init(self, *args, **kwargs)
        self.engine = EngineOperators()
        engines.append(self.engine)

    monkeypatch.setattr(section.Phases, "__init__", recording)
    with torch.device(device):
        model = case.build(variant)
    args, kwargs = case.inputs(device)
    crawl_training_step(model, args=args, kwargs=kwargs)
    assert engines and "aten.add" in engines[0].seen  # the models sum gradients (residuals, shared inputs)
    assert engines[0].seen <= ENGINE_WORK, engines[0].seen - ENGINE_WORK


def test_gpt2_attention_backward_includes_its_attention_products() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=1000, n_positions=128)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    report = crawl_training_step(model, args=(torch.randint(0, 1000, (2, 128)),))
    attention = next(layer for layer in report["training"]["layers"] if layer["path"] == "transformer.h.0.attn")
    assert attention["backward_flops"]["inclusive"]["value"] == 336_656_384  # 268,762,112 without the products
