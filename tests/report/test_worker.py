"""``analyze_run``: the pure function that turns one registry run into a report or a recorded failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchscan.report.worker import analyze_run
from torchscan.schema import validate_report

MODELS = '''
import torch
from torch import nn


def linear(features: int = 4):
    return nn.Linear(features, 2)


def raises():
    raise RuntimeError("factory exploded")


def not_a_module():
    return 42


def embedding():
    return nn.Embedding(10, 3)


def ids(length: int = 5):
    return (torch.arange(length).unsqueeze(0),), {}


def bad_inputs():
    return [1, 2, 3]


class Broken(nn.Module):
    def forward(self, x):
        raise ValueError("forward failed")


def broken():
    return Broken()
'''


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "worker_models.py").write_text(MODELS)
    return tmp_path


def job(folder: Path, factory: str, inputs: dict, **extra: object) -> dict:
    return {"entry": "e", "variant": None, "stem": "e", "folder": str(folder), "factory": f"worker_models:{factory}",
            "kwargs": {}, "inputs": inputs, "device": "cpu", **extra}


def test_generated_inputs_with_kwargs_and_dtype(folder: Path) -> None:
    result = analyze_run(job(folder, "linear", {"shapes": [[8]], "dtypes": None}, kwargs={"features": 8}))
    assert result["status"] == "ok"
    report = result["report"]
    validate_report(report)
    json.dumps(report)  # JSON-serializable as it is
    assert report["inputs"]["args"][0]["shape"] == [1, 8]
    assert report["totals"]["macs"]["value"] == 8 * 2
    ids = analyze_run(job(folder, "embedding", {"shapes": [[5]], "dtypes": ["int64"]}))["report"]
    assert ids["inputs"]["args"][0]["dtype"] == "int64"


def test_inputs_callable_and_meta_device(folder: Path) -> None:
    result = analyze_run(job(folder, "embedding", {"callable": "worker_models:ids", "kwargs": {"length": 7}},
                             device="meta"))
    assert result["status"] == "ok"
    report = result["report"]
    assert report["context"]["devices"] == ["meta"]
    # The CPU ids returned by the inputs callable were moved to the meta device with the model.
    assert report["inputs"]["args"][0] == {"kind": "tensor", "shape": [1, 7], "dtype": "int64", "device": "meta",
                                           "requires_grad": False}
    assert report["totals"]["parameters"]["total"] == 10 * 3


@pytest.mark.parametrize(("factory", "inputs", "stage", "kind", "message"), [
    ("missing", {"shapes": [[4]], "dtypes": None}, "import", "AttributeError", "has no attribute 'missing'"),
    ("raises", {"shapes": [[4]], "dtypes": None}, "build", "RuntimeError", "factory exploded"),
    ("not_a_module", {"shapes": [[4]], "dtypes": None}, "build", "TypeError", "returned int, not a torch.nn.Module"),
    ("embedding", {"callable": "worker_models:bad_inputs", "kwargs": {}}, "inputs", "TypeError",
     "must return (args, kwargs)"),
    ("broken", {"shapes": [[4]], "dtypes": None}, "analysis", "ValueError", "forward failed"),
])
def test_failures_name_the_stage_and_error(folder: Path, factory: str, inputs: dict, stage: str, kind: str,
                                           message: str) -> None:
    result = analyze_run(job(folder, factory, inputs))
    assert result["status"] == "failed"
    error = result["error"]
    assert (error["stage"], error["type"]) == (stage, kind)
    assert message in error["message"]


def test_a_missing_module_is_an_import_failure(folder: Path) -> None:
    result = analyze_run({**job(folder, "linear", {"shapes": [[4]], "dtypes": None}), "factory": "nope.deeper:f"})
    assert result["error"] == {"stage": "import", "type": "ModuleNotFoundError", "message": "No module named 'nope'"}
