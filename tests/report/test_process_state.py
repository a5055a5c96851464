"""Warm workers against one process per run: what a run changes in its process never reaches the next run's report,
and a build gives the same bytes either way."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from e2e import run_cli, write_models

from torchscan.report.registry.parsing import load_registry
from torchscan.report.runs.progress import Progress
from torchscan.report.runs.result_cache import ResultCache
from torchscan.report.runs.runner import isolated_executor, run_all

#: A factory that leaves its process changed: a global forward hook that zeroes every output, float64 as the
#: default dtype, grad mode off, a reseeded RNG, and a module-level counter of its own.
POLLUTER = '''
import torch
from torch import nn

BUILT = []


def polluter():
    BUILT.append(1)
    torch.nn.modules.module.register_module_forward_hook(lambda module, args, output: output * 0)
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    torch.manual_seed(len(BUILT))
    return nn.Linear(4, 4)


class Grid(nn.Module):
    """torch.meshgrid without ``indexing`` warns once per process, from PyTorch's C++ code."""

    def forward(self, x):
        rows, columns = torch.meshgrid(x[0], x[0])
        return rows + columns


def grid():
    return Grid()


def counted():
    """A model whose width is the number of times this module built a polluter (0 in a fresh process)."""
    return nn.Linear(4, 4 + len(BUILT))
'''

REGISTRY = '''
[catalog]
title = "Isolation"

[[models]]
name = "polluter"
factory = "polluting:polluter"
input_shape = [4]

[[models]]
name = "counted"
factory = "polluting:counted"
input_shape = [4]

[[models]]
name = "tiny"
factory = "e2e_models:tiny"
input_shape = [3, 8, 8]

[[models]]
name = "grid"
factory = "polluting:grid"
input_shape = [3]

[[models.variants]]
name = "first"

[[models.variants]]
name = "again"
'''


@pytest.fixture()
def registry_folder(tmp_path: Path) -> Path:
    write_models(tmp_path)
    (tmp_path / "polluting.py").write_text(POLLUTER, encoding="utf-8")
    (tmp_path / "models.toml").write_text(REGISTRY, encoding="utf-8")
    return tmp_path


def _results(folder: Path, isolation: str, order: list[str]) -> tuple[dict[str, dict[str, Any]], Any]:
    """Every run's result with one worker (``--jobs 1``: the runs share it, in ``order``), and the executor."""
    registry = load_registry(folder / "models.toml")
    runs = sorted(registry.runs, key=lambda run: order.index(run.stem))
    executors: list[Any] = []

    def factory(jobs: int, timeout: float) -> Any:
        executors.append(isolated_executor(jobs, timeout, isolation))
        return executors[-1]

    results = run_all(runs, registry.folder, ResultCache(None, folder / f"out-{isolation}-{order[0]}"),
                      Progress(io.StringIO()), jobs=1, timeout=120.0, executor_factory=factory)
    return results, executors[0]


def test_a_run_that_changes_global_state_cannot_change_the_next_report(registry_folder: Path) -> None:
    alone, _ = _results(registry_folder, "run", ["tiny", "counted", "grid", "grid.again", "polluter"])
    after, executor = _results(registry_folder, "worker", ["polluter", "counted", "tiny", "grid", "grid.again"])
    assert executor.processes_started == 1 and executor.recycled == []  # one warm worker served every run
    assert after["polluter"]["status"] == "ok"
    for stem in ("tiny", "counted", "grid", "grid.again"):
        assert after[stem] == alone[stem]
    # PyTorch warns about meshgrid once per process; each run still records it.
    assert "torch.meshgrid" in after["grid.again"]["report"]["context"]["warnings"][0]["message"]
    report = after["tiny"]["report"]
    assert report["context"]["dtypes"] == ["float32"] and report["totals"]["macs"]["value"] > 0
    # The polluter's module was imported afresh for the next run: its counter started again from zero.
    assert after["counted"]["report"]["totals"]["parameters"]["total"] == 4 * 4 + 4


def test_a_build_is_byte_identical_with_warm_workers_and_a_process_per_run(registry_folder: Path) -> None:
    registry = registry_folder / "models.toml"
    (registry_folder / "models.toml").write_text(REGISTRY + BROKEN, encoding="utf-8")
    outputs = {}
    for isolation in ("worker", "run"):
        outputs[isolation] = registry_folder / isolation
        result = run_cli("build", registry, "--output", outputs[isolation], "--jobs", "2", "--isolation", isolation,
                         "--timeout", "60", cwd=registry_folder)
        assert result.returncode == 1, result.stderr  # "raises" and "dies" fail, in the same stage either way
        assert "raises: failed (build: RuntimeError)" in result.stderr
        assert "dies: failed (worker: WorkerDied)" in result.stderr
    warm, fresh = (_tree(outputs[isolation]) for isolation in ("worker", "run"))
    assert sorted(warm) == sorted(fresh)
    assert [name for name in warm if warm[name] != fresh[name]] == []


#: Entries that fail, warn or use the meta device, after the three above.
BROKEN = '''
[[models]]
name = "raises"
factory = "e2e_models:raises"
input_shape = [4]

[[models]]
name = "dies"
factory = "e2e_models:dies"
input_shape = [4]

[[models]]
name = "warns"
factory = "e2e_models:warns"
input_shape = [5, 8]

[[models]]
name = "fails"
factory = "e2e_models:fails"
input_shape = [4]

[[models]]
name = "tagger"
factory = "e2e_models:tagger"
inputs = "e2e_models:tagger_inputs"
device = "meta"

[[models]]
name = "wide"
factory = "e2e_models:tiny"
input_shape = [3, 8, 8]
kwargs = { width = 8 }
'''


def _tree(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}
