"""Placement requests: ``device = "cuda"`` and ``memory`` in the registry, the Dask resources they become, and the
clear failure of a CUDA run where there is no CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchscan.report.registry.parsing import RegistryError, load_registry
from torchscan.report.registry.placement import dask_resources, parse_memory, require_device
from torchscan.report.runs.result_cache import cache_key

ENTRY = """
[[models]]
name = "big"
factory = "models:big"
input_shape = [4]
{extra}

[[models.variants]]
name = "a"

[[models.variants]]
name = "b"
"""


def _registry(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "models.toml"
    path.write_text(ENTRY.format(extra=extra), encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "size"), [("16GB", 16 * 10**9), ("512MiB", 512 * 2**20), ("2.5 TB", 2.5e12),
                                            ("100kb", 10**5), ("1 GiB", 2**30), ("64B", 64)])
def test_memory_sizes_are_parsed_in_decimal_and_binary_units(text: str, size: float) -> None:
    assert parse_memory(text) == size


@pytest.mark.parametrize("value", ["16", "16 GBs", "-1GB", "0GB", "GB", 16, None])
def test_a_bad_memory_size_names_the_accepted_forms(value: object) -> None:
    with pytest.raises(ValueError, match="expected a (positive )?size"):
        parse_memory(value)


def test_cuda_and_memory_entries_request_dask_resources_for_every_variant(tmp_path: Path) -> None:
    registry = load_registry(_registry(tmp_path, 'device = "cuda"\nmemory = "16GB"'))
    jobs = [run.to_job(tmp_path) for run in registry.runs]
    assert [job["device"] for job in jobs] == ["cuda", "cuda"]
    assert all(dask_resources(job) == {"GPU": 1, "MEMORY": 16 * 10**9} for job in jobs)
    plain = load_registry(_registry(tmp_path, "")).runs[0].to_job(tmp_path)
    assert "memory" not in plain and dask_resources(plain) == {}


def test_memory_is_a_placement_request_outside_the_cache_key(tmp_path: Path) -> None:
    """Asking for more memory changes where a run may go, never its result: the cached result stays valid."""
    with_memory = load_registry(_registry(tmp_path, 'memory = "16GB"')).runs[0].to_job(tmp_path)
    without = load_registry(_registry(tmp_path, "")).runs[0].to_job(tmp_path)
    on_cuda = load_registry(_registry(tmp_path, 'device = "cuda"')).runs[0].to_job(tmp_path)
    assert cache_key(with_memory, tmp_path, "2.13.0") == cache_key(without, tmp_path, "2.13.0")
    assert cache_key(on_cuda, tmp_path, "2.13.0") != cache_key(without, tmp_path, "2.13.0")


def test_bad_device_and_memory_are_registry_problems(tmp_path: Path) -> None:
    with pytest.raises(RegistryError) as caught:
        load_registry(_registry(tmp_path, 'device = "tpu"\nmemory = "lots"'))
    problems = caught.value.problems
    assert 'models[0] (big): device: expected one of cpu, meta, cuda, got str "tpu"' in problems
    assert any(line.startswith("models[0] (big): memory: expected a size such as \"16GB\"") and '"lots"' in line
               for line in problems)
    path = _registry(tmp_path, "")
    path.write_text(path.read_text().replace('name = "a"', 'name = "a"\nmemory = "1GB"'))
    with pytest.raises(RegistryError, match=r"variants\[0\] \(a\): memory: unknown key"):  # memory is per entry
        load_registry(path)


def test_a_cuda_run_without_cuda_fails_before_the_model_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    require_device("cpu")
    require_device("meta")
    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(RuntimeError, match=r'device = "cuda", but this torch build \(.*\) has no CUDA support'):
        require_device("cuda")
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match='device = "cuda", but no CUDA device is visible to this process'):
        require_device("cuda")
