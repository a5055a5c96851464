"""The registry key ``as_device``: an entry analyzed on fake-tensor stand-ins of a device (``crawl_module(...,
as_device=...)``), validated with the entry and the key named, carried to the worker only when set."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e import write_registry_folder

from torchscan.report.registry.parsing import RegistryError, load_registry
from torchscan.report.registry.placement import GPU_RESOURCE, dask_resources
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
    return Attention()
'''

REGISTRY = '''
[[models]]
name = "standing-in"
factory = "stand_in_models:attention"
input_shape = [64, 32]
device = "meta"
as_device = "cpu"
training = { optimizer = "sgd" }

[[models]]
name = "on-meta"
factory = "stand_in_models:attention"
input_shape = [64, 32]
device = "meta"
'''


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    return write_registry_folder(tmp_path, "stand_in_models", MODELS, REGISTRY)


def test_as_device_reaches_the_job_only_when_set(folder: Path) -> None:
    registry = load_registry(folder / "models.toml")
    standing_in, on_meta = (entry.runs[0] for entry in registry.entries)
    assert (standing_in.as_device, on_meta.as_device) == ("cpu", None)
    assert standing_in.to_job(folder)["as_device"] == "cpu"
    assert "as_device" not in on_meta.to_job(folder)  # other entries keep their jobs, and their cache keys


def test_the_worker_analyzes_on_stand_ins_the_forward_and_the_training_step(folder: Path) -> None:
    registry = load_registry(folder / "models.toml")
    standing_in, on_meta = (analyze_run(entry.runs[0].to_job(folder))["report"] for entry in registry.entries)
    assert standing_in["context"]["stand_ins"] == {"kind": "fake_tensors", "device": "cpu", "model_devices": ["meta"]}
    assert standing_in["memory"]["attention_kernel"]["name"] == "flash"
    assert standing_in["training"]["memory"]["stand_ins"]["device"] == "cpu"
    assert "stand_ins" not in on_meta["context"] and on_meta["context"]["meta_kernels"] == "accelerator"
    assert on_meta["memory"]["attention_kernel"]["name"] == "efficient"  # float32 on meta: CUDA's choice


def test_cuda_stand_ins_ask_a_cluster_for_a_gpu(folder: Path) -> None:
    (folder / "models.toml").write_text(REGISTRY.replace('as_device = "cpu"', 'as_device = "cuda"'), encoding="utf-8")
    registry = load_registry(folder / "models.toml")
    jobs = [entry.runs[0].to_job(folder) for entry in registry.entries]
    assert [dask_resources(job) for job in jobs] == [{GPU_RESOURCE: 1}, {}]


@pytest.mark.parametrize(("value", "described"), [('"meta"', 'str "meta"'), ("3", "int 3"), ('"gpu"', 'str "gpu"')])
def test_a_bad_as_device_is_reported_with_the_entry_and_the_key(folder: Path, value: str, described: str) -> None:
    (folder / "models.toml").write_text(REGISTRY.replace('as_device = "cpu"', f"as_device = {value}"),
                                        encoding="utf-8")
    with pytest.raises(RegistryError) as caught:
        load_registry(folder / "models.toml")
    assert caught.value.problems == [(
        "models[0] (standing-in): as_device: expected one of 'cpu', 'cuda' (analyze on fake-tensor stand-ins of that "
        f"device, keeping its kernel choices), got {described}")]
