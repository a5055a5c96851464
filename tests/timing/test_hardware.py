"""`torchscan.HARDWARE` (published peaks with their sources) and `measure_hardware` (this machine, measured): shapes,
sources, sizes as the OS writes them, and global state left as found. No assertion on speed."""

from __future__ import annotations

import pytest
import torch

from torchscan import HARDWARE, measure_hardware
from torchscan.timing.hardware import PEAK_KEYS, cpu_last_level_cache, parse_size


@pytest.mark.parametrize("name", list(HARDWARE))
def test_every_device_has_dense_peaks_a_bandwidth_and_a_published_source(name) -> None:
    device = HARDWARE[name]
    assert device["name"] == name and device["kind"] == "gpu"
    assert set(device["peak_flops"]) <= set(PEAK_KEYS) and {"float32", "tf32", "bfloat16"} <= set(device["peak_flops"])
    assert all(peak > 1e12 for peak in device["peak_flops"].values())
    assert device["peak_flops"]["bfloat16"] >= device["peak_flops"]["tf32"] >= device["peak_flops"]["float32"] / 2
    assert device["memory_bandwidth"] > 1e11 and device["last_level_cache_bytes"] > 0
    assert "https://" in device["source"] and ("datasheet" in device["source"].lower()
                                               or "data sheet" in device["source"].lower()
                                               or "whitepaper" in device["source"].lower())


def test_the_a100_reads_llama_2_7b_weights_in_about_6_6_ms() -> None:
    weights = 6_738_415_616 * 2  # Llama-2-7B's parameters in bfloat16: 13.5 GB
    assert weights / HARDWARE["A100 SXM 80GB"]["memory_bandwidth"] == pytest.approx(6.6e-3, rel=0.01)
    assert HARDWARE["A100 SXM 80GB"]["peak_flops"]["bfloat16"] == 312e12  # dense (624 with sparsity)
    assert HARDWARE["H100 SXM"]["peak_flops"]["float8"] == 1978.9e12  # dense (3,958 with sparsity)


@pytest.mark.parametrize(("text", "expected"), [("16384K", 16 << 20), ("16 MiB", 16 << 20), ("512 KiB", 512 << 10),
                                                ("32M", 32 << 20), ("1 GiB", 1 << 30), ("big", None)])
def test_cache_sizes_are_read_as_sysfs_and_lscpu_write_them(text, expected) -> None:
    assert parse_size(text) == expected


def test_the_last_level_cache_says_where_it_was_read() -> None:
    size, source = cpu_last_level_cache()
    assert (size is None) == (source == "not found")
    assert size is None or size >= 1 << 16


def test_measure_hardware_returns_a_hardware_entry_and_leaves_global_state_as_found() -> None:
    threads, grad, dtype, rng = (torch.get_num_threads(), torch.is_grad_enabled(), torch.get_default_dtype(),
                                 torch.get_rng_state())
    device = measure_hardware("cpu", repeats=2)
    assert (torch.get_num_threads(), torch.is_grad_enabled(), torch.get_default_dtype()) == (threads, grad, dtype)
    assert torch.equal(torch.get_rng_state(), rng)
    assert device["name"].startswith("this machine: ") and device["source"] == "measured"
    assert "float32" in device["peak_flops"] and set(device["peak_flops"]) <= {"float32", "bfloat16"}
    assert all(peak > 0 for peak in device["peak_flops"].values()) and device["memory_bandwidth"] > 0
    measurement = device["measurement"]
    assert measurement["threads"] == threads and measurement["repeats"] == 2
    assert measurement["copy_bytes"] >= 2 * 4 * (device["last_level_cache_bytes"] or 0)  # read + written, 4 x LLC
    assert measurement["cache_source"] == cpu_last_level_cache()[1]


def test_measure_hardware_names_a_device_it_cannot_measure() -> None:
    with pytest.raises(ValueError, match="repeats must be a positive integer, got 0"):
        measure_hardware("cpu", repeats=0)
    with pytest.raises(ValueError, match="device must be 'cpu' or a CUDA device, got 'meta'"):
        measure_hardware("meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="this machine has no CUDA device"):
            measure_hardware("cuda")
