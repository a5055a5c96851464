"""Analysis overhead: each analysis's time as a ratio of a plain ``no_grad`` forward of the same model.

For every model, the variants run alternately in one process on the same inputs (plain forward, ``crawl_module``,
``crawl_module(mode="structure")``, ``crawl_module(memory=True)`` (a full analysis that also traces memory),
``measure_flops``, PyTorch's own ``FlopCounterMode``; then again), so machine
noise hits every variant alike; the medians of the repeats are printed as ratios to the plain forward. Warm-up
runs come first: the first-use cost of a dispatch mode in a fresh process is measured separately.

Two more measurements answer questions the ratios cannot:

* ``synthetic_100`` / ``synthetic_10k``: the same tiny layer repeated, 100 and 10,000 layer calls; the extra time
  per layer call of each must be about equal (assembly linear in the number of calls).
* ``llama2_70b_meta``: the LLaMA-2-70B configuration on the ``meta`` device; a fresh interpreter also reports the
  analysis's memory (process peak RSS, its growth during the first analysis, and the ``tracemalloc`` peak).

    python benchmarks/overhead.py [--repeats 7] [--threads 1] [--models resnet,bert] [--clock cpu] [--stat min]

``floor`` is PyTorch's own part of a full analysis, measured with nothing of TorchScan in it: the same global pair
of module hooks calling functions that do nothing, under a dispatch mode that only runs each operator. ``hooks`` is
the same without the dispatch mode: the floor of ``mode="structure"``, which observes no operator. The last three
columns are the analysis's extra time per layer call, ``(crawl - plain) / calls``, and the part of it that is
TorchScan's own work, ``(crawl - floor) / calls``, and the same of structure mode, ``(structure - hooks) / calls``,
in microseconds.

Model names: resnet18, resnet50, mobilenet_v2, bert_base, transformer, lstm, synthetic_100, synthetic_10k,
llama2_70b_meta, and the third-party twins tv_resnet50 (torchvision) and hf_bert_base (transformers);
``--models`` keeps the names containing any of its comma-separated parts. Run it on a quiet machine (the load
average is printed with the results).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "benchmarks")]

import native_transformer  # noqa: E402
import third_party  # noqa: E402
from selection import selected  # noqa: E402
from zoo import bert, llama, lstm, mobilenet, resnet  # noqa: E402

from torchscan import crawl_module, measure_flops  # noqa: E402

Case = tuple[nn.Module, tuple, dict]


def image(model: nn.Module, size: int = 224, batch: int = 1) -> Case:
    """``batch`` seeded ``size`` x ``size`` RGB images (one by default)."""
    return model, (torch.rand(batch, 3, size, size, generator=torch.Generator().manual_seed(0)),), {}


def synthetic(calls: int) -> Case:
    """``calls`` layer calls in all: the root Sequential and ``calls - 1`` alternating Linear(16, 16) and ReLU."""
    layers = [nn.Linear(16, 16) if index % 2 == 0 else nn.ReLU() for index in range(calls - 1)]
    return nn.Sequential(*layers), (torch.rand(1, 16),), {}


def llama_70b_meta() -> Case:
    with torch.device("meta"):
        model = llama.llama2_70b()
    return model, *llama.llama_inputs(seq_len=128, device="meta")


CASES: dict[str, Callable[[], Case]] = {
    "resnet18": lambda: image(resnet.resnet18()),
    "resnet50": lambda: image(resnet.resnet50()),
    "mobilenet_v2": lambda: image(mobilenet.mobilenet_v2()),
    "bert_base": lambda: (bert.bert_base(), *bert.bert_inputs(batch=1, seq_len=128)),
    "transformer": lambda: (native_transformer.transformer_base(), *native_transformer.transformer_inputs()),
    "lstm": lambda: (lstm.lstm_classifier(), *lstm.lstm_inputs()),
    "synthetic_100": lambda: synthetic(100),
    "synthetic_10k": lambda: synthetic(10_000),
    "llama2_70b_meta": llama_70b_meta,
    "tv_resnet50": third_party.torchvision_resnet50,
    "hf_bert_base": third_party.transformers_bert_base,
}
#: Small inputs for the deterministic counts (instructions.py, bytecodes.py): TorchScan's work per layer call does not
#: depend on the image size or the sequence length, and small inputs keep the kernels from dominating the counts.
SMALL_CASES: dict[str, Callable[[], Case]] = {
    "mobilenet_v2@32": lambda: image(mobilenet.mobilenet_v2(), 32),
    "resnet50@32": lambda: image(resnet.resnet50(), 32),
    "bert_base@16": lambda: (bert.bert_base(), *bert.bert_inputs(batch=1, seq_len=16)),
    "synthetic_1k": lambda: synthetic(1000),
    "llama2_70b_meta": llama_70b_meta,
}
VARIANTS = ("plain", "hooks", "floor", "crawl", "structure", "memory", "measure_flops", "FlopCounterMode")


class BareMode(TorchDispatchMode):
    """A dispatch mode that only runs each operator: what PyTorch charges for observing every operator."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _no_pre_hook(module: nn.Module, args: tuple) -> None:
    pass


def _no_post_hook(module: nn.Module, args: tuple, *rest: object) -> None:
    pass


def variants(model: nn.Module, args: tuple, kwargs: dict) -> dict[str, Callable[[], object]]:
    def plain() -> None:
        with torch.no_grad():
            model(*args, **kwargs)

    def hooked(dispatch: Callable[[], Any]) -> None:
        """A no_grad forward under the global hook pair (as crawl_module registers it), calling functions that do
        nothing, inside ``dispatch()``."""
        handles = (register_module_forward_pre_hook(_no_pre_hook),
                   register_module_forward_hook(_no_post_hook, with_kwargs=True, always_call=True))
        try:
            with torch.no_grad(), dispatch():
                model(*args, **kwargs)
        finally:
            for handle in handles:
                handle.remove()

    def flop_counter() -> None:
        with torch.no_grad(), FlopCounterMode(display=False):
            model(*args, **kwargs)

    return {
        "plain": plain,
        "hooks": lambda: hooked(contextlib.nullcontext),  # structure mode's floor: no dispatch mode
        "floor": lambda: hooked(BareMode),  # a full analysis's floor: a dispatch mode that only runs operators
        "crawl": lambda: crawl_module(model, args=args, kwargs=kwargs),
        "structure": lambda: crawl_module(model, args=args, kwargs=kwargs, mode="structure"),
        "memory": lambda: crawl_module(model, args=args, kwargs=kwargs, memory=True),  # a full analysis + memory
        "measure_flops": lambda: measure_flops(plain),
        "FlopCounterMode": flop_counter,
    }


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}


STATISTICS: dict[str, Callable[[list[float]], float]] = {"median": statistics.median, "min": min}


def measure(model: nn.Module, args: tuple, kwargs: dict, repeats: int, clock: Callable[[], float] = time.perf_counter,
            statistic: Callable[[list[float]], float] = statistics.median) -> dict[str, float]:
    """Seconds of each variant over ``repeats`` alternating rounds (their median or min), after a warm-up round."""
    model.eval()
    samples = alternate(variants(model, args, kwargs), repeats, clock)
    return {name: statistic(values) for name, values in samples.items()}


def alternate(functions: dict[str, Callable[[], object]], repeats: int,
              clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds of each function in each of ``repeats`` rounds that call every function in turn, after a warm-up
    round: machine noise hits every function alike, and first-use costs stay out of the samples."""
    for function in functions.values():
        function()
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            start = clock()
            function()
            samples[name].append(clock() - start)
    return samples


def layer_calls(model: nn.Module, args: tuple, kwargs: dict) -> int:
    return len(crawl_module(model, args=args, kwargs=kwargs, mode="structure")["layers"])


MEMORY_PROBE = """
import sys, time, tracemalloc
sys.path[:0] = {paths!r}
import torch, overhead
from torchscan import crawl_module
model, args, kwargs = overhead.llama_70b_meta()
model.eval()
with torch.no_grad():
    model(*args, **kwargs)
before = overhead.peak_rss()
crawl_module(model, args=args, kwargs=kwargs)  # the first analysis in this process, with its first-use costs
first = overhead.peak_rss()
start = time.perf_counter()
crawl_module(model, args=args, kwargs=kwargs)
seconds = time.perf_counter() - start
tracemalloc.start()
crawl_module(model, args=args, kwargs=kwargs)
traced = tracemalloc.get_traced_memory()[1]
print(seconds, before, first, traced)
"""


def peak_rss() -> float:
    """This process's peak resident set size in bytes: ``VmHWM``, the high-water mark of its own address space.

    Not ``ru_maxrss``: Linux carries the parent's peak into a child started with fork/vfork and exec.
    """
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def memory_probe() -> dict[str, float]:
    """The 70B meta analysis in a fresh interpreter: the time of a second analysis, the process peak RSS before and
    after the first one, and the peak of Python allocations during a third (``tracemalloc``, untimed)."""
    code = MEMORY_PROBE.format(paths=[str(ROOT), str(ROOT / "site_models"), str(ROOT / "benchmarks")])
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    output = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    seconds, before, after, traced = map(float, output.stdout.split())
    return {"seconds": seconds, "rss_before": before, "rss_peak": after, "traced_peak": traced}


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


def print_row(name: str, times: dict[str, float], calls: int) -> None:
    base = times["plain"]
    ratios = "".join(f"{times[variant] / base:>{len(variant) + 2}.2f}x" for variant in VARIANTS[1:])
    per_call = (times["crawl"] - base) / calls * 1e6
    own = (times["crawl"] - times["floor"]) / calls * 1e6
    own_structure = (times["structure"] - times["hooks"]) / calls * 1e6
    print(f"{name:<17}{calls:>7}{base * 1e3:>10.1f}{ratios}{per_call:>14.1f}{own:>10.1f}{own_structure:>16.1f}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="alternating rounds per model (default 7)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--models", default=None, help="comma-separated parts of model names to keep")
    parser.add_argument("--clock", choices=CLOCKS, default="wall",
                        help="wall time (default), or process CPU time: steadier on a loaded machine with --threads 1")
    parser.add_argument("--stat", choices=STATISTICS, default="median",
                        help="median of the rounds (default), or min: the least disturbed round on a loaded machine")
    parser.add_argument("--no-memory", action="store_true", help="skip the 70B memory probe and first-call cost")
    options = parser.parse_args()
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    names = selected(options.models, CASES)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {options.clock} clock, {options.stat} of "
          f"{options.repeats} alternating rounds; load average {os.getloadavg()[0]:.2f} at start")
    header = "".join(f"{variant:>{len(variant) + 3}}" for variant in VARIANTS[1:])
    print(f"{'model':<17}{'calls':>7}{'plain ms':>10}{header}{'crawl us/call':>14}{'own us':>10}{'structure own':>16}")
    for name in names:
        torch.manual_seed(0)
        model, args, kwargs = CASES[name]()
        times = measure(model, args, kwargs, options.repeats, CLOCKS[options.clock], STATISTICS[options.stat])
        print_row(name, times, layer_calls(model, args, kwargs))
        del model, args, kwargs
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    if options.no_memory:
        return
    if "llama2_70b_meta" in names:
        probe = memory_probe()
        print(f"llama2_70b_meta memory (fresh process): analysis {probe['seconds']:.2f} s, process peak RSS "
              f"{probe['rss_peak'] / 2**20:.0f} MB (growth during the first analysis "
              f"{(probe['rss_peak'] - probe['rss_before']) / 2**20:.0f} MB), tracemalloc peak "
              f"{probe['traced_peak'] / 2**20:.0f} MB")
    print(f"first-call extra cost in a fresh process: {first_call_extra():.3f} s")


if __name__ == "__main__":
    main()
