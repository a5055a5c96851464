"""``crawl_training_step(..., memory=True)``: the step's peak broken down at the peak, checked against hand counts,
against activation checkpointing and against ``measure_peak_memory`` of the same step."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from integrations.third_party_models import import_torchvision, import_transformers
from torch import nn
from torch.utils.checkpoint import checkpoint

from torchscan import crawl_training_step, measure_peak_memory
from torchscan.memory.forward import METHOD
from torchscan.schema import validate_report

FLOAT = 4
BATCH, WIDTH, BLOCKS = 4, 32, 3


def value(result: dict[str, Any]) -> Any:
    assert result["status"] == "complete" and result["unit"] == "bytes" and result["method"] == METHOD
    return result["value"]


def at_peak(report: dict[str, Any]) -> dict[str, int]:
    return {name: value(result) for name, result in report["training"]["memory"]["at_peak"].items()}


def test_an_adamw_step_of_a_linear_stack_peaks_in_the_optimizer_with_the_bytes_counted_by_hand():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    report = crawl_training_step(model, args=(torch.randn(2, 8),), optimizer="adamw", memory=True)
    validate_report(report)
    memory = report["training"]["memory"]
    parameters = (8 * 16 + 16 + 16 * 4 + 4) * FLOAT
    # AdamW's state: two moments per parameter and one float32 step count per parameter tensor
    state = 2 * parameters + 4 * FLOAT
    breakdown = at_peak(report)
    assert memory["phase_at_peak"] == "optimizer"
    assert {name: breakdown[name] for name in ("parameters", "gradients", "optimizer_state", "saved_activations",
                                               "inputs", "buffers")} == {
        "parameters": parameters, "gradients": parameters, "optimizer_state": state, "saved_activations": 0,
        "inputs": 2 * 8 * FLOAT, "buffers": 0}
    assert value(memory["peak"]) == sum(breakdown.values())
    assert report["training"]["totals"]["training_peak_bytes"] == memory["peak"]
    # the ReLU saves its output (the second Linear saves the same storage: counted once, where it was saved first)
    assert [(row["path"], row["call_index"], value(row["bytes"])) for row in memory["saved_by_layer"]] == [
        ("1", 0, 2 * 16 * FLOAT)]


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.act, self.second = nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.act(self.first(x)))


class Blocks(nn.Module):
    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


def saved_bytes(checkpointed: bool) -> tuple[int, list[tuple[str, int]]]:
    torch.manual_seed(0)
    report = crawl_training_step(Blocks(checkpointed), args=(torch.randn(BATCH, WIDTH),), memory=True)
    memory = report["training"]["memory"]
    rows = [(row["path"], value(row["bytes"])) for row in memory["saved_by_layer"]]
    return sum(size for _, size in rows), rows


def test_activation_checkpointing_saves_only_the_block_inputs():
    activation = BATCH * WIDTH * FLOAT
    # Without checkpointing each block saves its ReLU's output and its input (the model's input pre-exists);
    # with it, each block keeps only its input (checkpoint saves it outside the block), and what the blocks
    # compute is recomputed in the backward.
    plain, plain_rows = saved_bytes(False)
    kept, kept_rows = saved_bytes(True)
    assert plain == (2 * BLOCKS - 1) * activation
    assert kept == (BLOCKS - 1) * activation
    assert plain - kept == BLOCKS * activation
    assert [path for path, _ in plain_rows] == ["blocks.0.act", "blocks.1.first", "blocks.1.act", "blocks.2.first",
                                                "blocks.2.act"]
    assert kept_rows == [("", kept)]  # saved by the checkpoint calls in the root's forward


def logits_sum(output: Any) -> torch.Tensor:
    return getattr(output, "logits", output).sum()  # transformers' output or a tensor


def traced_and_measured_step(model: nn.Module, inputs: torch.Tensor) -> tuple[int, int]:
    """The traced first step's peak above what existed before it, and the measured peak of the same step (whose
    output is dropped after the loss, as the traced step drops it)."""
    report = crawl_training_step(model, args=(inputs,), optimizer="adamw", memory=True, loss=logits_sum)
    breakdown = {name: value(result) for name, result in report["training"]["memory"]["first_step"]["at_peak"].items()}
    traced = sum(breakdown.values()) - breakdown["parameters"] - breakdown["inputs"] - breakdown["buffers"]

    def step() -> None:
        for parameter in model.parameters():
            parameter.grad = None
        optimizer = torch.optim.AdamW(model.parameters())
        logits_sum(model(inputs)).backward()
        optimizer.step()

    model.train()
    measured = measure_peak_memory(step, device="cpu")["peak_bytes"]
    for parameter in model.parameters():
        parameter.grad = None
    return traced, measured


def test_a_resnet18_adamw_step_is_within_five_percent_of_the_measured_peak():
    torch.manual_seed(0)
    model = import_torchvision().models.resnet18()
    traced, measured = traced_and_measured_step(model, torch.randn(2, 3, 64, 64))
    assert traced == pytest.approx(measured, rel=0.05)


def test_a_two_layer_gpt2_adamw_step_is_within_five_percent_of_the_measured_peak():
    library = import_transformers()
    torch.manual_seed(0)
    model = library.GPT2LMHeadModel(library.GPT2Config(vocab_size=1000, n_positions=64, n_embd=128, n_layer=2,
                                                       n_head=4))
    traced, measured = traced_and_measured_step(model, torch.randint(0, 1000, (2, 64)))
    assert traced == pytest.approx(measured, rel=0.05)


def test_the_memory_flag_must_be_a_bool():
    with pytest.raises(TypeError, match="memory must be a bool"):
        crawl_training_step(nn.Linear(2, 2), args=(torch.randn(1, 2),), memory=1)
