"""Cost-curve timing: a six-point sweep of Llama-2-7B (``transformers``' own classes, meta device) over 128..32,768.

Issue 35's target is a cold six-point sweep under 20 s on two cores. The script prints where the time goes:
importing torch, TorchScan and ``transformers``, building the model on meta (maximum positions raised to 32k),
then each size's analysis (``crawl_module`` on ``input_ids`` of that length) and the exact fit; with ``--decode``
the same for one decode step per context (`torchscan.decode_step_inputs`); with ``--profile`` the functions that
took the most cumulative time in the analyses.

    python benchmarks/cost_curve.py [--sizes 128,512,2048,8192,16384,32768] [--decode] [--profile]
"""

from __future__ import annotations

import argparse
import time

START = time.perf_counter()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models")]

import torch  # noqa: E402

import torchscan  # noqa: E402

IMPORTED = time.perf_counter()


def _timed_sweep(model: torch.nn.Module, sizes: list[int], call, label: str) -> dict:
    """``cost_curve`` with each size's analysis timed (the analyses are the same ``crawl_module`` calls)."""
    points, started = [], time.perf_counter()
    for size in sizes:
        before = time.perf_counter()
        args, kwargs = call(size)
        report = torchscan.crawl_module(model, args=args, kwargs=kwargs)
        points.append({"size": size, "totals": report["totals"]})
        print(f"  {label} {size:>6}: {time.perf_counter() - before:6.2f} s  {len(report['layers'])} layer calls, "
              f"MACs {report['totals']['macs']['value']:,}")
    fitting = time.perf_counter()
    curves = torchscan.fit_curves(sizes, [point["totals"] for point in points])
    done = time.perf_counter()
    print(f"  {label} analyses {fitting - started:.2f} s, fit {1000 * (done - fitting):.1f} ms")
    for name in ("macs", "module_flops", "operator_flops"):
        curve = curves[name]
        print(f"  {label} {name}: {curve['kind']} {[p['coefficients'] for p in curve['pieces']]} "
              f"verified at {curve['verified_at']}")
    return curves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="128,512,2048,8192,16384,32768")
    parser.add_argument("--decode", action="store_true", help="also sweep one decode step per context length")
    parser.add_argument("--profile", action="store_true", help="print the top functions by cumulative time")
    options = parser.parse_args()
    sizes = [int(size) for size in options.sizes.split(",")]
    from zoo.hf_llama import llama2_7b

    model_started = time.perf_counter()
    with torch.device("meta"):
        model = llama2_7b(max_position_embeddings=max(32768, *sizes))
    built = time.perf_counter()
    print(f"imports (torch, torchscan) {IMPORTED - START:.2f} s; transformers import and model build "
          f"{built - model_started:.2f} s; threads {torch.get_num_threads()}")
    profiler = None
    if options.profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    _timed_sweep(model, sizes, lambda size: ((), {"input_ids": torch.zeros(1, size, dtype=torch.long,
                                                                            device="meta")}), "prefill")
    if options.decode:
        _timed_sweep(model, sizes, lambda size: torchscan.decode_step_inputs(model, size, device="meta"), "decode")
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    print(f"total wall time {time.perf_counter() - START:.2f} s")


if __name__ == "__main__":
    main()
