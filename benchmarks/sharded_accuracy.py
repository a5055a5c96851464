"""The sharded step's analyzed per-device peak against the measured one, over the full grid the tests cover in part.

Run from the repository root: ``python benchmarks/sharded_accuracy.py``. For the tests' 4-block MLP and 2-layer
transformers Llama (``tests/parallel/sharded_models.py``), at world sizes 2, 4 and 8, ``fsdp`` and
``fsdp_no_reshard``, with and without bf16 parameters, it prints the steady-state peak that
`torchscan.parallel.step.sharded_step` analyzes on fake tensors, the measured absolute peak of the same plan's
third step on real CPU tensors over the same fake process group, their ratio, and whether the collectives observed
equal the plan's closed form; then hsdp, ddp and activation checkpointing on one configuration each.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "tests" / "integrations"),
                str(ROOT / "tests" / "parallel")]

from sharded_models import MODELS, adamw, measured_peak  # noqa: E402

from torchscan.parallel.step import sharded_step  # noqa: E402

PRECISIONS: dict[str, dict[str, Any] | None] = {"fp32": None, "bf16": {"param_dtype": torch.bfloat16}}


def row(model: str, plan: dict[str, Any], label: str, **options: Any) -> None:
    build, call = MODELS[model]
    args, kwargs, loss = call()
    section = sharded_step(build(), args, kwargs, loss, adamw, plan, **options)
    analyzed = section["per_device"]["peak"]["value"]
    measured = measured_peak(build, call(), plan, **options)
    collectives = section["collectives"]
    print(f"{model:>5} {label:<28} analyzed {analyzed:>11,} measured {measured:>11,} ratio {analyzed / measured:.4f} "
          f"collectives {'==' if collectives['matches'] else '!='} formula "
          f"(all-gather {collectives['observed']['all_gather']['bytes']:,} B, "
          f"reduce-scatter {collectives['observed']['reduce_scatter']['bytes']:,} B, "
          f"all-reduce {collectives['observed']['all_reduce']['bytes']:,} B)", flush=True)


def main() -> None:
    warnings.filterwarnings("ignore")
    for model in MODELS:
        for size in (2, 4, 8):
            for strategy in ("fsdp", "fsdp_no_reshard"):
                for name, precision in PRECISIONS.items():
                    plan: dict[str, Any] = {"strategy": strategy, "world_size": size}
                    if precision is not None:
                        plan["mixed_precision"] = precision
                    row(model, plan, f"{strategy} x{size} {name}")
        row(model, {"strategy": "hsdp", "world_size": 8, "shard_group_size": 4}, "hsdp x8 (groups of 4) fp32")
        row(model, {"strategy": "ddp", "world_size": 4}, "ddp x4 fp32")
        row(model, {"strategy": "fsdp", "world_size": 4}, "fsdp x4 fp32 + checkpointing", activation_checkpointing=True)


if __name__ == "__main__":
    main()
