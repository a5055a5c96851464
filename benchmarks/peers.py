"""TorchScan's overhead beside its peers: PyTorch's ``FlopCounterMode`` and torchinfo, side by side in one process.

For each model, these variants run on the same model and inputs, in one process:

* ``plain``: a ``no_grad`` forward of the model in eval mode, the baseline of every ratio;
* ``FlopCounterMode``: the same forward inside ``torch.utils.flop_counter.FlopCounterMode(display=False)``;
* ``torchinfo``: ``torchinfo.summary(model, input_data=args, verbose=0, **kwargs)`` (layer structure and MACs),
  and ``torchinfo_out``, the same with ``col_names=("output_size",)``;
* ``full``: ``torchscan.crawl_module(model, args=args, kwargs=kwargs, mode="full")``;
* ``structure``: the same with ``mode="structure"``.

Every variant is first called twice, so that first-use costs (the import of dynamo on a dispatch mode's first use,
torchinfo's own imports) stay out of the samples. Then come ``--rounds`` interleaved rounds: each round calls every
variant ``--repeats`` times back to back and keeps the fastest call, and the order of the variants rotates from one
round to the next, so that drift in the machine's load hits all of them alike. A variant's time is the median over
the rounds of those minimums (``--stat min``: their minimum), and its ratio is that time over the plain forward's.

How to read it: the two verdicts per model are ratios of ratios, that is, of times measured in the same rounds.
``full / FlopCounterMode`` is TorchScan's full analysis over PyTorch's FLOP counter, and ``structure / torchinfo``
is structure mode over the faster of the two torchinfo variants; at or below 1.00 means TorchScan costs no more than
the peer on that model. A model with fused fast paths (``nn.Transformer``'s encoder layers) also gets
``FCM_decomposed``: ``FlopCounterMode`` on the decomposed path that TorchScan's tracer keeps PyTorch on (the fused
kernels have no formula in PyTorch's registry, so on the fast path it counts nothing for them), with the FLOPs each
counts, and ``full`` over it: the comparison on the same operators. Each number is one run's: run it on a quiet machine, with ``--threads 1`` (the default)
so that kernels do not compete with the load for cores; the load average is printed at start and end.

    python benchmarks/peers.py [--models mobilenet,resnet50,bert,transformer] [--rounds 7] [--repeats 3]
        [--threads 1] [--stat median]

Models (``--models`` keeps the names containing any of its comma-separated parts): ``tv_mobilenet_v2`` and
``tv_resnet50`` (torchvision, random weights, one 224 x 224 image), ``hf_bert_base`` (transformers' ``BertModel``
from the bert-base-uncased config, random weights, one 128-token row with padding) and ``transformer``
(``nn.Transformer`` with the default base sizes, batch-first, 128-token source and target with a causal mask), built
as ``overhead.py`` builds them. Needs torchinfo (``pip install torchinfo``), torchvision and transformers.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "benchmarks")]

import overhead  # noqa: E402
import third_party  # noqa: E402
from selection import selected  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402
from zoo.torchvision_ops import ensure_torchvision  # noqa: E402

from torchscan import crawl_module  # noqa: E402
from torchscan.module_facts import FUSED_PATH_TYPES  # noqa: E402

WARMUP_CALLS = 2


def torchvision_mobilenet_v2() -> overhead.Case:
    """torchvision's MobileNetV2, random init, one seeded 224 x 224 image."""
    return overhead.image(ensure_torchvision().models.mobilenet_v2())


def torchvision_resnet50() -> overhead.Case:
    ensure_torchvision()  # before third_party's own definition of the operators, which then finds them defined
    return third_party.torchvision_resnet50()


def transformers_bert_base() -> overhead.Case:
    ensure_torchvision()  # transformers imports torchvision
    return third_party.transformers_bert_base()


CASES: dict[str, Callable[[], overhead.Case]] = {
    "tv_mobilenet_v2": torchvision_mobilenet_v2,
    "tv_resnet50": torchvision_resnet50,
    "hf_bert_base": transformers_bert_base,
    "transformer": overhead.CASES["transformer"],
}
#: Variants in their printed order; the rounds rotate the order in which they run.
VARIANTS = ("plain", "FlopCounterMode", "full", "torchinfo", "torchinfo_out", "structure")


def variants(model: torch.nn.Module, args: tuple, kwargs: dict) -> dict[str, Callable[[], object]]:
    """The measured calls: overhead.py's plain forward and ``FlopCounterMode``, torchinfo, and both TorchScan modes;
    for a model with fused fast paths, also ``FlopCounterMode`` on the decomposed path TorchScan observes."""
    from torchinfo import summary

    ours = overhead.variants(model, args, kwargs)
    measured = {
        "plain": ours["plain"],
        "FlopCounterMode": ours["FlopCounterMode"],
        "full": lambda: crawl_module(model, args=args, kwargs=kwargs, mode="full"),
        "torchinfo": lambda: summary(model, input_data=args, verbose=0, **kwargs),
        "torchinfo_out": lambda: summary(model, input_data=args, verbose=0, col_names=("output_size",), **kwargs),
        "structure": lambda: crawl_module(model, args=args, kwargs=kwargs, mode="structure"),
    }
    if fused_path_owners(model):
        measured[DECOMPOSED] = lambda: flop_counter_on_the_decomposed_path(model, args, kwargs)
    return measured


#: ``FlopCounterMode`` with the module hooks that keep PyTorch on the decomposed path (as TorchScan's tracer does).
DECOMPOSED = "FCM_decomposed"


def fused_path_owners(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules whose fused fast path (``nn.TransformerEncoderLayer``, ``nn.MultiheadAttention``) PyTorch leaves
    while a module hook is registered on them."""
    return [module for module in model.modules() if isinstance(module, FUSED_PATH_TYPES)]


def flop_counter_on_the_decomposed_path(model: torch.nn.Module, args: tuple, kwargs: dict) -> int:
    """``FlopCounterMode``'s FLOPs of a forward on the decomposed path: the fused kernels of the fast path have no
    FLOP formula in PyTorch's registry, so on that path it counts nothing for them."""
    handles = [module.register_forward_pre_hook(lambda module, inputs: None) for module in fused_path_owners(model)]
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return counter.get_total_flops()


def counted_flops(model: torch.nn.Module, args: tuple, kwargs: dict) -> str:
    """What each counts on this model: ``FlopCounterMode`` as it runs, on the decomposed path, and TorchScan."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(*args, **kwargs)
    report = crawl_module(model, args=args, kwargs=kwargs)
    return (f"FLOPs counted: FlopCounterMode {counter.get_total_flops():,}, on the decomposed path "
            f"{flop_counter_on_the_decomposed_path(model, args, kwargs):,}; TorchScan "
            f"{report['operator_flops']['total']['value']:,} ({report['operator_flops']['total']['status']})")


def interleaved(functions: dict[str, Callable[[], object]], rounds: int, repeats: int) -> dict[str, list[float]]:
    """Per function, the fastest of ``repeats`` back-to-back calls in each of ``rounds`` rounds, after warm-up calls;
    each round starts one function later than the previous one."""
    for _, function in itertools.product(range(WARMUP_CALLS), functions.values()):
        function()
    names = list(functions)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                functions[name]()
                best = min(best, time.perf_counter() - start)
            samples[name].append(best)
    return samples


def verdicts(times: dict[str, float]) -> tuple[float, float]:
    """``full / FlopCounterMode`` and ``structure / torchinfo`` (the faster torchinfo variant): at or below 1 meets
    the goal."""
    return times["full"] / times["FlopCounterMode"], times["structure"] / min(times["torchinfo"],
                                                                              times["torchinfo_out"])


def met(ratio: float) -> str:
    return "yes" if ratio <= 1.0 else "NO"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma-separated parts of model names to keep (default all)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per model (default 7)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="back-to-back calls of each variant per round, the fastest kept (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--stat", choices=overhead.STATISTICS, default="median",
                        help="statistic over the rounds of each round's fastest call (default median)")
    options = parser.parse_args()
    if options.rounds < 1 or options.repeats < 1 or options.threads < 1:
        parser.error("--rounds, --repeats and --threads must be at least 1")
    names = selected(options.models, CASES)
    torch.set_num_threads(options.threads)
    statistic = overhead.STATISTICS[options.stat]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {options.stat} over {options.rounds} "
          f"interleaved rounds of the fastest of {options.repeats} calls; load average {os.getloadavg()[0]:.2f} "
          "at start", flush=True)
    results: dict[str, tuple[float, float]] = {}
    for name in names:
        torch.manual_seed(0)
        try:
            model, args, kwargs = CASES[name]()
        except (ImportError, RuntimeError) as error:  # a missing or broken third-party package: measure the others
            print(f"{name}: cannot build ({type(error).__name__}: {error})", file=sys.stderr, flush=True)
            continue
        model.eval()
        samples = interleaved(variants(model, args, kwargs), options.rounds, options.repeats)
        times = {variant: statistic(values) for variant, values in samples.items()}
        print(f"\n{name:<17}{'ms':>10}{'x plain':>10}")
        for variant in (*VARIANTS, DECOMPOSED):
            if variant in times:
                print(f"  {variant:<15}{times[variant] * 1e3:>10.2f}{times[variant] / times['plain']:>9.2f}x")
        results[name] = verdicts(times)
        full, structure = results[name]
        print(f"  full / FlopCounterMode {full:.2f} ({met(full)}), structure / torchinfo {structure:.2f} "
              f"({met(structure)})", flush=True)
        if DECOMPOSED in times:
            print(f"  full / FlopCounterMode on the decomposed path {times['full'] / times[DECOMPOSED]:.2f}; "
                  f"{counted_flops(model, args, kwargs)}", flush=True)
        del model, args, kwargs, samples
    print(f"\nload average {os.getloadavg()[0]:.2f} at end")
    print("verdicts (at or below 1.00 meets the goal)")
    print(f"{'model':<17}{'full / FlopCounterMode':>24}{'structure / torchinfo':>24}")
    for name, (full, structure) in results.items():
        print(f"{name:<17}{full:>19.2f} {met(full):<4}{structure:>19.2f} {met(structure)}")


if __name__ == "__main__":
    main()
