"""Training-step analysis overhead: ``crawl_training_step`` as a ratio of a plain training step of the same model.

For every model, two variants run alternately in one process on the same inputs, after a warm-up round of each:

* ``plain``: ``model.train()``, the forward, the loss, ``backward()``, an optimizer step and ``zero_grad()``;
* ``analysis``: ``crawl_training_step(model, args=..., kwargs=..., loss=..., optimizer=...)`` of the same step.

Both use the same loss (``losses.loss_of``: cross-entropy of the first output tensor against class 0, or its mean
squared error against zeros) and the same optimizer (TorchScan's own ``"adamw"`` factory by default). The printed
ratio is the median (or, with ``--stat min``, the least) of the per-round ratios ``analysis / plain``, against the
issue-30 target of at most 1.5x; the step's FLOPs and their status come from the analysis's report. The analysis
counts the optimizer step on ``meta`` stand-ins (no arithmetic) while the plain step updates the real weights, so a
large model on a small input (BERT-base at a few tokens) can show a ratio below 1.

``llama2_70b_meta``: the LLaMA-2-70B configuration on the ``meta`` device, analyzed once in a fresh interpreter
(the first analysis there, first-use costs included), against the targets of under 60 s and under 2 GB peak RSS.
The peak is the process's ``VmHWM`` (``overhead.peak_rss``), not ``resource.getrusage``'s ``ru_maxrss``, which on
Linux carries this benchmark's own peak into a child started with fork/vfork and exec.

    python benchmarks/training.py [--repeats 7] [--threads 1] [--models resnet,bert] [--batch 1] [--image-size 224]
                                  [--seq-len 128] [--optimizer adamw] [--clock cpu] [--stat min] [--no-llama]

Model names: resnet50, bert_base (the catalog's own), tv_resnet50 (torchvision), hf_bert_base (transformers) and
llama2_70b_meta; ``--models`` keeps the names containing any of its comma-separated parts. The defaults match
``overhead.py``: one 224x224 image, one 128-token row. A quick check that the script runs:
``python benchmarks/training.py --models resnet50 --batch 2 --image-size 64 --repeats 1``. Run it on a quiet
machine (the load average is printed with the results).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
PATHS = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "benchmarks")]
sys.path[:0] = PATHS

import overhead  # noqa: E402
import third_party  # noqa: E402
from losses import loss_of  # noqa: E402
from selection import selected  # noqa: E402
from zoo import bert, resnet  # noqa: E402

from torchscan import crawl_training_step  # noqa: E402
from torchscan.training.loop import OPTIMIZERS  # noqa: E402

RATIO_TARGET = 1.5
LLAMA = "llama2_70b_meta"
LLAMA_SECONDS_TARGET = 60.0
LLAMA_RSS_TARGET = 2 * 2**30


@dataclass(frozen=True)
class Inputs:
    """The input size of every model: images per batch and their side, or rows per batch and their tokens."""

    batch: int
    image_size: int
    seq_len: int


CASES: dict[str, Callable[[Inputs], overhead.Case]] = {
    "resnet50": lambda inputs: overhead.image(resnet.resnet50(), inputs.image_size, inputs.batch),
    "bert_base": lambda inputs: (bert.bert_base(), *bert.bert_inputs(batch=inputs.batch, seq_len=inputs.seq_len)),
    "tv_resnet50": lambda inputs: third_party.torchvision_resnet50(inputs.image_size, inputs.batch),
    "hf_bert_base": lambda inputs: third_party.transformers_bert_base(inputs.seq_len, inputs.batch),
}


def variants(model: nn.Module, args: tuple, kwargs: dict, optimizer: str,
             reports: list[dict[str, Any]]) -> dict[str, Callable[[], object]]:
    """The plain training step and its analysis; ``reports`` keeps the latest analysis's report."""
    step_optimizer = OPTIMIZERS[optimizer](list(model.parameters()))

    def plain() -> None:
        model.train()
        loss_of(model(*args, **kwargs)).backward()
        step_optimizer.step()
        step_optimizer.zero_grad()

    def analysis() -> None:
        reports[:] = [crawl_training_step(model, args=args, kwargs=kwargs, loss=loss_of, optimizer=optimizer)]

    return {"plain": plain, "analysis": analysis}


def measure(model: nn.Module, args: tuple, kwargs: dict, options: argparse.Namespace) -> dict[str, Any]:
    """The plain step's and the analysis's seconds, their per-round ratio (all by ``--stat``) and the last report."""
    reports: list[dict[str, Any]] = []
    samples = overhead.alternate(variants(model, args, kwargs, options.optimizer, reports), options.repeats,
                                 overhead.CLOCKS[options.clock])
    statistic = overhead.STATISTICS[options.stat]
    ratios = [analysis / plain for plain, analysis in zip(samples["plain"], samples["analysis"], strict=True)]
    return {"plain": statistic(samples["plain"]), "analysis": statistic(samples["analysis"]),
            "ratio": statistic(ratios), "report": reports[-1]}


def verdict(ok: bool) -> str:
    return "ok" if ok else "OVER"


def print_row(name: str, measured: dict[str, Any]) -> None:
    step = measured["report"]["training"]["totals"]["step"]
    print(f"{name:<14}{measured['plain'] * 1e3:>10.1f}{measured['analysis'] * 1e3:>13.1f}{measured['ratio']:>8.2f}x"
          f"{verdict(measured['ratio'] <= RATIO_TARGET):>7}{step['known_value'] / 1e9:>12.2f}  {step['status']}",
          flush=True)


LLAMA_PROBE = """
import json, sys, time
sys.path[:0] = {paths!r}
import overhead
from losses import loss_of
from torchscan import crawl_training_step
model, args, kwargs = {build}()
before = overhead.peak_rss()
start = time.perf_counter()
report = crawl_training_step(model, args=args, kwargs=kwargs, loss=loss_of, optimizer={optimizer!r})
seconds = time.perf_counter() - start
totals = report["training"]["totals"]
print(json.dumps({{"seconds": seconds, "rss_before": before, "rss_peak": overhead.peak_rss(),
                  "step_flops": totals["step"]["known_value"],
                  "incomplete": sorted(name for name, total in totals.items() if total["status"] != "complete")}}))
"""


def llama_probe(optimizer: str, build: str = "overhead.llama_70b_meta") -> dict[str, Any]:
    """One ``crawl_training_step`` of the model ``build()`` returns (the 70B meta one by default) in a fresh
    interpreter: its seconds, the process peak RSS before and after it, the step's FLOPs and any incomplete total."""
    code = LLAMA_PROBE.format(paths=PATHS, build=build, optimizer=optimizer)
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    output = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    return json.loads(output.stdout.splitlines()[-1])


def print_llama(probe: dict[str, Any]) -> None:
    seconds, peak = probe["seconds"], probe["rss_peak"]
    incomplete = ", ".join(probe["incomplete"]) or "none"
    print(f"{LLAMA} training step (fresh process, first analysis): {seconds:.1f} s "
          f"(target < {LLAMA_SECONDS_TARGET:.0f} s: {verdict(seconds < LLAMA_SECONDS_TARGET)}), peak RSS "
          f"{peak / 2**20:.0f} MB (target < {LLAMA_RSS_TARGET / 2**20:.0f} MB: {verdict(peak < LLAMA_RSS_TARGET)}; "
          f"{probe['rss_before'] / 2**20:.0f} MB before the analysis), step {probe['step_flops'] / 1e12:.1f} TFLOPs, "
          f"incomplete totals: {incomplete}", flush=True)


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="alternating rounds per model (default 7)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--models", default=None, help="comma-separated parts of model names to keep")
    parser.add_argument("--batch", type=int, default=1, help="images or token rows per batch (default 1)")
    parser.add_argument("--image-size", type=int, default=224, help="image side in pixels (default 224)")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per row (default 128)")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw", help="the step's optimizer (default adamw)")
    parser.add_argument("--clock", choices=overhead.CLOCKS, default="wall",
                        help="wall time (default), or process CPU time: steadier on a loaded machine with --threads 1")
    parser.add_argument("--stat", choices=overhead.STATISTICS, default="median",
                        help="median of the rounds (default), or min: the least disturbed round on a loaded machine")
    parser.add_argument("--no-llama", action="store_true", help=f"skip {LLAMA} (same as leaving it out of --models)")
    return parser.parse_args()


def main() -> None:
    options = parse_options()
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    names = selected(options.models, [*CASES, LLAMA])
    inputs = Inputs(options.batch, options.image_size, options.seq_len)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), {options.optimizer}, batch "
          f"{inputs.batch}, {options.clock} clock, {options.stat} of {options.repeats} alternating rounds; "
          f"load average {os.getloadavg()[0]:.2f} at start")
    print(f"{'model':<14}{'plain ms':>10}{'analysis ms':>13}{'ratio':>9}{'<=' + str(RATIO_TARGET):>7}"
          f"{'step GFLOPs':>12}  status")
    for name in (name for name in names if name in CASES):
        torch.manual_seed(0)
        model, args, kwargs = CASES[name](inputs)
        print_row(name, measure(model, args, kwargs, options))
        del model, args, kwargs
    print(f"load average {os.getloadavg()[0]:.2f} at end")
    if LLAMA in names and not options.no_llama:
        print_llama(llama_probe(options.optimizer))


if __name__ == "__main__":
    main()
