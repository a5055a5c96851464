"""Analysis overhead: crawl_module / structure mode / measure_flops time as a ratio of a plain forward.

Each model's variants are timed alternately in one process (plain forward, full analysis, structure mode,
measure_flops, repeat), so machine noise hits every variant alike; the medians are printed as ratios to the plain
``torch.no_grad()`` forward. A separate fresh interpreter measures the first-call extra cost of an analysis.

    python benchmarks/overhead.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models")]

from torchscan import crawl_module, measure_flops  # noqa: E402
from zoo import bert, lstm, mobilenet, resnet  # noqa: E402


def models() -> dict[str, tuple[torch.nn.Module, tuple, dict]]:
    """Name -> (model, args, kwargs) for a ResNet-style CNN, a MobileNetV2, a Transformer encoder and an LSTM."""
    torch.manual_seed(0)
    bert_args, bert_kwargs = bert.bert_inputs(batch=1, seq_len=128)
    lstm_model = lstm.lstm_classifier()
    return {
        "resnet50 (224)": (resnet.resnet50(), (torch.rand(1, 3, 224, 224),), {}),
        "mobilenet_v2 (224)": (mobilenet.mobilenet_v2(), (torch.rand(1, 3, 224, 224),), {}),
        "bert_base (128 tokens)": (bert.bert_base(), bert_args, bert_kwargs),
        "lstm classifier": (lstm_model, *lstm.lstm_inputs()),
    }


def time_once(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def measure(model: torch.nn.Module, args: tuple, kwargs: dict, repeats: int) -> dict[str, float]:
    model.eval()

    def plain():
        with torch.no_grad():
            model(*args, **kwargs)

    variants = {
        "plain": plain,
        "crawl_module": lambda: crawl_module(model, args=args, kwargs=kwargs),
        "structure": lambda: crawl_module(model, args=args, kwargs=kwargs, mode="structure"),
        "measure_flops": lambda: measure_flops(plain),
    }
    for function in variants.values():  # warm-up: first-use costs are measured separately
        function()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, function in variants.items():
            samples[name].append(time_once(function))
    return {name: statistics.median(values) for name, values in samples.items()}


FIRST_CALL = """
import sys, time, torch
sys.path[:0] = {paths!r}
from torch import nn
import torchscan
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
x = torch.rand(1, 8)
with torch.no_grad():
    model(x)
start = time.perf_counter(); torchscan.crawl_module(model, args=(x,)); first = time.perf_counter() - start
start = time.perf_counter(); torchscan.crawl_module(model, args=(x,)); second = time.perf_counter() - start
print(first - second)
"""


def first_call_extra() -> float:
    code = FIRST_CALL.format(paths=[str(ROOT)])
    output = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return float(output.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    options = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {options.repeats} alternating runs")
    print(f"{'model':<24}{'plain ms':>10}{'crawl':>9}{'structure':>11}{'measure_flops':>15}")
    for name, (model, args, kwargs) in models().items():
        times = measure(model, args, kwargs, options.repeats)
        base = times["plain"]
        print(f"{name:<24}{base * 1e3:>10.1f}{times['crawl_module'] / base:>8.2f}x"
              f"{times['structure'] / base:>10.2f}x{times['measure_flops'] / base:>14.2f}x")
    print(f"first-call extra cost in a fresh process: {first_call_extra():.3f} s")


if __name__ == "__main__":
    main()
