"""The registry key ``meta_kernels``: on meta, an accelerator's attention kernel (the default) or meta's own math path
(``crawl_module(..., meta_kernels=...)``), validated with the entry and the key named, carried to the worker only
when set, for the forward and the training step."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e import write_registry_folder

from torchscan.report.registry.parsing import RegistryError, load_registry
from torchscan.report.runs.worker import analyze_run

MODELS = '''
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)

    def forward(self, tokens):
        query, key, value = self.qkv(tokens).view(1, -1, 3, 2, 16).permute(2, 0, 3, 1, 4)
        return nn.functional.scaled_dot_product_attention(query, key, value).sum(1)


def attention():
    return Attention().to(torch.bfloat16)
'''

REGISTRY = '''
[[models]]
name = "math"
factory = "meta_kernel_models:attention"
input_shape = [64, 32]
dtype = "bfloat16"
device = "meta"
meta_kernels = "math"
training = { optimizer = "sgd" }

[[models]]
name = "accelerator"
factory = "meta_kernel_models:attention"
input_shape = [64, 32]
dtype = "bfloat16"
device = "meta"
training = { optimizer = "sgd" }
'''


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    return write_registry_folder(tmp_path, "meta_kernel_models", MODELS, REGISTRY)


def test_meta_kernels_reaches_the_job_only_when_set(folder: Path) -> None:
    registry = load_registry(folder / "models.toml")
    math, accelerator = (entry.runs[0] for entry in registry.entries)
    assert (math.meta_kernels, accelerator.meta_kernels) == ("math", None)
    assert math.to_job(folder)["meta_kernels"] == "math"
    assert "meta_kernels" not in accelerator.to_job(folder)  # other entries keep their jobs, and their cache keys


def test_the_worker_takes_the_kernels_asked_for_in_the_forward_and_the_training_step(folder: Path) -> None:
    registry = load_registry(folder / "models.toml")
    math, accelerator = (analyze_run(entry.runs[0].to_job(folder))["report"] for entry in registry.entries)
    assert (math["context"]["meta_kernels"], accelerator["context"]["meta_kernels"]) == ("math", "accelerator")
    assert math["memory"]["attention_kernel"]["name"] == math["training"]["memory"]["attention_kernel"]["name"] == (
        "math")
    assert accelerator["memory"]["attention_kernel"]["name"] == "flash"
    assert accelerator["training"]["memory"]["attention_kernel"]["name"] == "flash"
    backward = {row["operator"] for row in accelerator["training"]["operator_flops"]["by_operator"]}
    assert "aten._scaled_dot_product_flash_attention_backward" in backward


@pytest.mark.parametrize(("value", "described"), [('"flash"', 'str "flash"'), ("1", "int 1"), ("true", "bool True")])
def test_a_bad_meta_kernels_value_is_named_with_its_entry(folder: Path, value: str, described: str) -> None:
    (folder / "models.toml").write_text(REGISTRY.replace('meta_kernels = "math"', f"meta_kernels = {value}"),
                                        encoding="utf-8")
    with pytest.raises(RegistryError) as caught:
        load_registry(folder / "models.toml")
    assert caught.value.problems == [
        (f"models[0] (math): meta_kernels: expected one of 'accelerator', 'math' (on meta, the attention kernel an "
         f"accelerator would run, the default, or meta's own math path), got {described}")]
