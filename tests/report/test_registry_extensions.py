"""``custom_modules`` and ``custom_mapping`` in ``models.toml``: resolved like ``factory``, validated by ``check``,
part of the cache key, and passed to the analysis, so an entry with its own handlers builds complete."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from torchscan.report.build import BuildOptions, build
from torchscan.report.cli import main
from torchscan.report.registry.parsing import RegistryError, load_registry
from torchscan.report.runs.progress import Progress
from torchscan.report.runs.result_cache import cache_key
from torchscan.report.runs.worker import analyze_run

MODELS = '''
import math

import torch
from torch import nn
from torchscan import ModuleHandler


class Wave(nn.Module):
    """A leaf TorchScan has no formula for: a Bessel function of a linear map (an operator without FLOP formula)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return torch.special.bessel_j0(self.proj(x))


def wave():
    return nn.Sequential(Wave(), nn.ReLU())


def estimate_wave(call):
    elements = call.output.numel()
    return {"module_flops": elements, "macs": 0, "dmas": 2 * elements, "receptive_field": 1,
            "effective_stride": 1, "effective_padding": 0}


HANDLERS = {Wave: ModuleHandler(estimate_wave)}
FORMULAS = {torch.ops.aten.special_bessel_j0: lambda input_shape, *, out_shape: math.prod(out_shape)}
NOT_A_MAPPING = 3
'''

ENTRY = '''
[[models]]
name = "wave"
factory = "wave_models:wave"
input_shape = [4]
strict = true
{extra}
'''
EXTENSIONS = 'custom_modules = "wave_models:HANDLERS"\ncustom_mapping = "wave_models:FORMULAS"'


def registry(folder: Path, extra: str = EXTENSIONS) -> Path:
    (folder / "wave_models.py").write_text(MODELS, encoding="utf-8")
    path = folder / "models.toml"
    path.write_text(ENTRY.format(extra=extra), encoding="utf-8")
    return path


def job(folder: Path, extra: str = EXTENSIONS) -> dict:
    loaded = load_registry(registry(folder, extra))
    return loaded.runs[0].to_job(loaded.folder)


def test_the_keys_travel_with_the_job_and_change_the_cache_key(tmp_path: Path) -> None:
    with_extensions = job(tmp_path)
    assert with_extensions["custom_modules"] == "wave_models:HANDLERS"
    assert with_extensions["custom_mapping"] == "wave_models:FORMULAS"
    plain = job(tmp_path, extra="")
    assert "custom_modules" not in plain  # entries without the keys keep their jobs (and cache keys) as before
    assert cache_key(with_extensions, tmp_path, "2") != cache_key(plain, tmp_path, "2")


def test_the_analysis_uses_the_entry_handlers_and_formulas(tmp_path: Path) -> None:
    plain = analyze_run(job(tmp_path, extra=""))["report"]
    assert plain["totals"]["module_flops"]["status"] == "partial"
    assert plain["totals"]["operator_flops"]["status"] == "partial"
    result = analyze_run(job(tmp_path))
    assert result["status"] == "ok"
    totals = result["report"]["totals"]
    assert {totals[name]["status"] for name in ("module_flops", "macs", "dmas", "operator_flops")} == {"complete"}
    assert result["report"]["context"]["custom_modules"][0]["type"] == "wave_models.Wave"
    assert result["report"]["context"]["custom_formulas"] == ["aten.special_bessel_j0"]


def test_a_wrong_object_fails_the_run_naming_the_key_and_the_path(tmp_path: Path) -> None:
    result = analyze_run(job(tmp_path, extra='custom_modules = "wave_models:NOT_A_MAPPING"'))
    assert result["status"] == "failed" and result["error"]["stage"] == "import"
    assert "custom_modules (wave_models:NOT_A_MAPPING)" in result["error"]["message"]
    result = analyze_run(job(tmp_path, extra='custom_mapping = "wave_models:HANDLERS"'))
    assert "custom_mapping (wave_models:HANDLERS)" in result["error"]["message"]


def test_the_registry_names_the_key_of_a_malformed_path(tmp_path: Path) -> None:
    with pytest.raises(RegistryError) as raised:
        load_registry(registry(tmp_path, extra='custom_modules = "wave_models.HANDLERS"\ncustom_mapping = 3'))
    problems = "\n".join(raised.value.problems)
    assert 'models[0] (wave): custom_modules: expected "package.module:HANDLERS"' in problems
    assert 'models[0] (wave): custom_mapping: expected "package.module:FORMULAS"' in problems


def test_check_reports_a_path_that_cannot_be_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = registry(tmp_path, extra='custom_modules = "wave_models:HANDLER"\ncustom_mapping = "missing:FORMULAS"')
    assert main(["check", str(path)]) == 1
    errors = capsys.readouterr().err
    assert "models[0] (wave): custom_modules: module 'wave_models' (wave_models.py) defines no top-level name " \
           "'HANDLER' (did you mean 'HANDLERS'?)" in errors
    assert "models[0] (wave): custom_mapping: module 'missing' was not found" in errors
    assert main(["check", str(registry(tmp_path))]) == 0


def test_an_entry_with_its_handlers_builds_complete_under_strict(tmp_path: Path) -> None:
    loaded = load_registry(registry(tmp_path))
    output = tmp_path / "site"
    options = BuildOptions(output=output, jobs=1, timeout=60, strict=True)
    result = build(loaded, options, Progress(io.StringIO()),
                   executor_factory=lambda jobs, timeout: ThreadPoolExecutor(max_workers=jobs))
    assert result.exit_code == 0
    report = json.loads((output / "reports" / "wave.json").read_text(encoding="utf-8"))
    assert report["totals"]["macs"] == {"status": "complete", "value": 16, "known_value": 16, "unit": "MACs",
                                        "scope": "model", "method": "sum_of_layer_estimates"}
