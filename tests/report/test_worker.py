"""``analyze_run``: the pure function that turns one registry run into a report or a recorded failure."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from torchscan.report.runs.worker import analyze_run
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


class Inner(nn.Module):
    def forward(self, x):
        return helper(x)


def helper(x):
    raise ValueError("deep failure")


def nested():
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.ReLU(), Inner()))


class Noisy(nn.Linear):
    def forward(self, x):
        import warnings
        warnings.warn("this layer is noisy", UserWarning)
        warnings.warn("this layer is noisy", UserWarning)
        return super().forward(x)


def noisy():
    return Noisy(4, 4)
'''


@pytest.fixture()
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A registry folder of its own; its model module is imported afresh (as in a new worker process)."""
    (tmp_path / "worker_models.py").write_text(MODELS)
    monkeypatch.delitem(sys.modules, "worker_models", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
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


def test_a_forward_failure_names_the_layer_and_keeps_the_users_frames(folder: Path) -> None:
    error = analyze_run(job(folder, "nested", {"shapes": [[4]], "dtypes": None}))["error"]
    assert (error["stage"], error["type"], error["layer"]) == ("analysis", "ValueError", "1.1")
    frames = error["traceback"].splitlines()
    # Only the registry folder's own code, relative to it, innermost last; torch and torchscan frames are left out.
    call, throw = "        return helper(x)", '    raise ValueError("deep failure")'
    first, second = (MODELS.splitlines().index(text) + 1 for text in (call, throw))
    assert frames == [f'  File "worker_models.py", line {first}, in forward', call.replace("    ", "", 1),
                      f'  File "worker_models.py", line {second}, in helper', throw]
    assert str(folder) not in error["traceback"]
    build = analyze_run(job(folder, "raises", {"shapes": [[4]], "dtypes": None}))["error"]
    assert "layer" not in build and build["traceback"].endswith('raise RuntimeError("factory exploded")')


def test_warnings_become_report_context_not_stderr(folder: Path, capfd: pytest.CaptureFixture) -> None:
    result = analyze_run(job(folder, "noisy", {"shapes": [[4]], "dtypes": None}))
    assert result["report"]["context"]["warnings"] == [{"category": "UserWarning", "message": "this layer is noisy"}]
    validate_report(result["report"])
    assert "noisy" not in capfd.readouterr().err
    quiet = analyze_run(job(folder, "linear", {"shapes": [[4]], "dtypes": None}))["report"]
    assert "warnings" not in quiet["context"]  # reports without warnings are unchanged


def test_a_missing_module_is_an_import_failure(folder: Path) -> None:
    result = analyze_run({**job(folder, "linear", {"shapes": [[4]], "dtypes": None}), "factory": "nope.deeper:f"})
    assert result["error"] == {"stage": "import", "type": "ModuleNotFoundError", "message": "No module named 'nope'"}


@pytest.mark.parametrize("reuse", [True, False], ids=["warm-workers", "process-per-run"])
def test_a_spawned_worker_ignores_ctrl_c_and_the_build_process_does_not(reuse: bool) -> None:
    """The terminal sends SIGINT to every process of the build; workers leave it to the parent, which kills them,
    so an early Ctrl-C prints no worker tracebacks (the worker module arranges this before importing torch)."""
    import signal

    from torchscan.report.runs.isolated_executor import IsolatedProcessExecutor

    found = signal.getsignal(signal.SIGINT)  # Python's default handler, or SIG_IGN when launched in the background
    executor = IsolatedProcessExecutor(max_workers=1, reuse=reuse)
    try:
        assert executor.submit(interrupt_handler).result(timeout=120) == signal.SIG_IGN
    finally:
        executor.shutdown()
    assert signal.getsignal(signal.SIGINT) is found


def interrupt_handler() -> int:
    import signal

    import torchscan.report.runs.worker  # noqa: F401 - what a spawned run imports first

    return int(signal.getsignal(signal.SIGINT))
