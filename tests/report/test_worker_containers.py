"""A site build's worker takes a call whose argument is a container of each kind the one walker of call values
knows (`torchscan.values`): on ``device = "meta"`` it moves the tensors inside to meta, rebuilding the container as
its own type, for the forward and the training step, with and without ``as_device``."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e import write_registry_folder

from torchscan.report.registry.parsing import load_registry
from torchscan.report.runs.worker import analyze_run

MODELS = '''
import dataclasses
from collections import OrderedDict, namedtuple

import torch
from torch import nn

Pair = namedtuple("Pair", "features scale")


@dataclasses.dataclass(frozen=True)
class Batch:
    features: torch.Tensor
    scale: float = 1.0


WRAP = {"namedtuple": lambda t: Pair(t, 2), "dataclass": Batch, "mapping": lambda t: OrderedDict(features=t),
        "list": lambda t: [t, 2]}
READ = {"namedtuple": lambda v: v.features, "dataclass": lambda v: v.features, "mapping": lambda v: v["features"],
        "list": lambda v: v[0]}


class Reads(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.linear = nn.Linear(4, 3)

    def forward(self, value):
        return WRAP[self.kind](self.linear(READ[self.kind](value)))


def model(kind):
    return Reads(kind)


def inputs(kind):
    return (WRAP[kind](torch.randn(2, 4)),), {}
'''

ENTRY = '''
[[models]]
name = "{kind}{suffix}"
factory = "container_models:model"
kwargs = {{ kind = "{kind}" }}
inputs = "container_models:inputs"
inputs_kwargs = {{ kind = "{kind}" }}
device = "meta"
training = {{ optimizer = "sgd" }}
{extra}
'''
KINDS = ("namedtuple", "dataclass", "mapping", "list")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("containers")
    entries = [ENTRY.format(kind=kind, suffix=suffix, extra=extra) for kind in KINDS
               for suffix, extra in (("", ""), ("-stand-ins", 'as_device = "cpu"'))]
    return write_registry_folder(folder, "container_models", MODELS, "".join(entries))


@pytest.mark.parametrize("as_device", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_the_worker_moves_and_rebuilds_each_container_kind(folder: Path, kind: str, as_device: bool) -> None:
    registry = load_registry(folder / "models.toml")
    name = kind + ("-stand-ins" if as_device else "")
    run = next(entry for entry in registry.entries if entry.name == name).runs[0]
    result = analyze_run(run.to_job(folder))
    assert result["status"] == "ok", result
    report = result["report"]
    assert report["totals"]["macs"]["value"] == 2 * 4 * 3
    assert report["inputs"]["args"][0]["kind"] in ("namedtuple", "dataclass", "mapping", "list")
    assert report["training"]["totals"]["backward"]["status"] == "complete"
